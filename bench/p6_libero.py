"""P6: real LIBERO (1 env, ~100 steps per episode) with the reward model off / on.

One ``LiberoEnv`` (LIBERO-10 task 0, agentview + wrist cameras at 256x256, as in
``evolve_envs/configs/libero_10.yaml``) is built once; three ``make_env`` stacks wrap that same env
and episodes alternate between them (reset time is not counted, only the steps):

* ``off``: ``reward_model.enable: false``;
* ``on, sync, instant``: the shipped config's reward block (pairwise critic, start 64, every 16,
  ``calls: sync``) against an embedded mock service (change rule) with no latency;
* ``on, async, 500 ms``: the same with ``calls: async`` (``max_lag_steps`` 16) against a mock
  service that takes 500 ms per batch (a GPU-model stand-in).

Policy: uniform random actions (seeded). Columns: ms per env step, ratio of throughput to
``off`` (median of per-round ratios), model calls per episode, summed wall time the episode spent
inside calls (sync) as the client measured it.

Run (needs the ``libero`` extra and a headless GL: ``MUJOCO_GL=egl`` or ``osmesa``)::

    .venv/bin/python bench/p6_libero.py           # ~3 min: build ~10 s, 6 episodes
    .venv/bin/python bench/p6_libero.py --quick   # ~1 min: 20-step episodes, 1 round
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import gymnasium as gym
import numpy as np
from _common import Rounds, machine_note, print_table

from evolve_envs import make_env
from evolve_envs.reward.service.hosting.embedded import EmbeddedService


def stacks(base: gym.Env, steps: int, instant: str, slow: str, start: int, every: int) -> dict:
    def factory(**_: Any) -> gym.Env:
        return base

    env = {"max_episode_steps": steps}
    common = {"enable": True, "mode": "pairwise", "start_step": start, "call_every": every,
              "milestone_every": 4 * every, "camera": "agentview_image"}  # fmt: skip
    cfgs = {
        "off": {"env": env, "reward_model": {"enable": False}},
        "on, sync, instant": {
            "env": env,
            "reward_model": {**common, "endpoint": instant, "calls": "sync"},
        },
        "on, async, 500 ms": {
            "env": env,
            "reward_model": {**common, "endpoint": slow, "calls": "async", "max_lag_steps": every},
        },
    }
    return {name: make_env(cfg, env_factory=factory) for name, cfg in cfgs.items()}


def run_episode(env: gym.Env, steps: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    call_s = 0.0
    info: dict[str, Any] = {}
    start = time.perf_counter()
    for k in range(steps):
        _, _, term, trunc, info = env.step(rng.uniform(-1, 1, 7).astype(np.float32))
        if info.get("progress_checked"):
            call_s += float(info.get("reward_model_latency_s") or 0.0)
        if term or trunc:
            steps = k + 1
            break
    wall = time.perf_counter() - start
    return {
        "ms_per_step": 1000 * wall / steps,
        "steps": steps,
        "calls": int(info.get("progress_calls", 0)),
        "call_ms": 1000 * call_s,
        "progress": float(info.get("progress", float("nan"))),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="20-step episodes, one round")
    p.add_argument("--steps", type=int, default=100, help="steps per episode")
    p.add_argument("--repeats", type=int, default=2, help="interleaved rounds")
    args = p.parse_args()
    start, every = 64, 16
    if args.quick:
        args.steps, args.repeats, start, every = 20, 1, 8, 4
    print(f"P6 on {machine_note()}", flush=True)
    from evolve_envs.envs.libero import LiberoEnv

    t0 = time.perf_counter()
    base = LiberoEnv("libero_10", 0, cameras=("agentview", "wrist"), image_size=256)
    base.reset(seed=0)
    print(f"LIBERO env built and reset in {time.perf_counter() - t0:.1f} s", flush=True)
    instant = EmbeddedService("mock", {"rule": "change"}).start()
    slow = EmbeddedService("mock", {"rule": "change", "latency_ms": 500}).start()
    envs: dict[str, gym.Env] = {}
    try:
        envs = stacks(base, args.steps, instant.url, slow.url, start, every)
        rounds = Rounds(list(envs), args.repeats)
        for i, name in enumerate(rounds):
            r = run_episode(envs[name], args.steps, seed=i // len(envs))
            rounds.record(name, r["ms_per_step"], **r)
            print(f"  {name}: {r['ms_per_step']:.1f} ms/step over {r['steps']} steps", flush=True)
    finally:
        for env in envs.values():
            env.close()
        base.close()
        instant.stop()
        slow.stop()
    rows = [
        [
            name,
            rounds.median(name),
            rounds.ratio(name, "off", invert=True),
            rounds.extra_median(name, "calls"),
            rounds.extra_median(name, "call_ms") if name.startswith("on, sync") else float("nan"),
            int(rounds.extra_median(name, "steps")),
        ]
        for name in rounds.names
    ]
    print_table(
        f"P6 real LIBERO-10 task 0 (2 cameras 256², random policy), {args.steps}-step episodes, "
        f"start {start} / every {every}, {args.repeats} rounds",
        ["reward", "ms/step", "ratio vs off", "calls/episode", "in calls ms (sync)", "steps"],
        rows,
    )


if __name__ == "__main__":
    main()
