"""A rollout driver for the reward-node drill: episodes of ReachPlace whose rewards come from the
Serve app `reward` by handle, one JSON line per episode on stdout, until the file `STOP` exists.

    python tests/cluster/drill_rollout.py RAY_ADDRESS STOP
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import ray

from evolve_envs import make_env

#: every call may take at most this long, retries and backoff included
CALL_BUDGET_S = 20.0


def main() -> None:
    address, stop = sys.argv[1], Path(sys.argv[2])
    ray.init(address=address, log_to_driver=False)
    env = make_env(
        {
            "env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 16},
            "reward_model": {
                "enable": True,
                "endpoint": "ray://reward",
                "camera": "image",
                "start_step": 0,
                "call_every": 1,
                "calls": "async",  # calls overlap the steps: some are in flight at any time
                "timeout": 5.0,
                "max_retries": 3,
                "call_budget_s": CALL_BUDGET_S,
            },
        }
    )
    stats = env.get_wrapper_attr("client").stats
    episode = 0
    try:
        while not stop.exists():
            started = time.time()
            env.reset(seed=episode)
            rewards = []
            while True:
                _, reward, terminated, truncated, info = env.step(env.action_space.sample())
                rewards.append(float(reward))
                if terminated or truncated:
                    break
            summary = info["episode_reward_model"]
            line = {
                "episode": episode,
                "t_start": started,
                "t_end": time.time(),
                "reward_sum": sum(rewards),
                "progress": summary["progress"],
                "calls": summary["progress_calls"],
                "answers": summary["answers"],
                "errors": summary["reward_model_errors"],
                "fallbacks": summary["reward_model_fallbacks"],
                "latency_max_s": summary["latency_max_s"],
                "retries_total": stats.retries,  # extra attempts, e.g. after a replica died
            }
            print(json.dumps(line), flush=True)
            episode += 1
    finally:
        env.close()


if __name__ == "__main__":
    main()
