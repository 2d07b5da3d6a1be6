"""Train PPO (Stable-Baselines3) on ReachPlace with rewards from the reward service.

Each of ``--envs`` subprocesses (``SubprocVecEnv``) builds the stack of the shipped
``reach_place`` config: ReachPlace, its time limit, and ``ProgressReward``, which asks the reward
service for progress every ``call_every`` steps and pays the progress deltas (dense reward, so an
episode's rewards sum to its final progress / 100). One service serves every subprocess: the URL
given with ``--endpoint``, else a mock service (rule ``reach_place``, no GPU) started here.

The policy sees the 3-number state ``(gripper x, gripper y, holding)`` (an MLP trains in seconds
on a CPU); the reward model sees the camera image inside the stack. For a pixel policy, keep the
``image`` key and use ``MultiInputPolicy``.

Usage::

    pip install -e '.[service]' stable-baselines3
    python examples/sb3_ppo_reach_place.py --timesteps 20000 --envs 4
    python examples/sb3_ppo_reach_place.py --endpoint http://gpu-1:8111   # a real reward model
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from evolve_envs import make_env

__all__ = ["EpisodeLedger", "make_thunk", "reward_service", "train"]


def make_thunk(
    endpoint: str, seed: int, reward_model: dict[str, Any] | None = None
) -> Callable[[], gym.Env]:
    """A picklable env builder for ``SubprocVecEnv``: the ``reach_place`` stack with its rewards
    from ``endpoint`` (``reward_model`` sets more of its keys), the policy's view cut down to the
    (bounded) state vector, episode statistics in ``info["episode"]`` as Stable-Baselines3 reads
    them."""

    def thunk() -> gym.Env:
        env = make_env("reach_place", reward_model={**(reward_model or {}), "endpoint": endpoint})
        env = gym.wrappers.FilterObservation(env, ["state"])
        env = gym.wrappers.FlattenObservation(env)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env.reset(seed=seed)
        return env

    return thunk


@contextlib.contextmanager
def reward_service(endpoint: str | None) -> Iterator[str]:
    """``endpoint`` as given, else the URL of a mock service (rule ``reach_place``) started here
    and stopped when the block exits."""
    if endpoint:
        yield endpoint
        return
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    with EmbeddedService("mock", {"rule": "reach_place"}) as svc:
        yield svc.url


@dataclass
class EpisodeLedger:
    """Finished episodes as Stable-Baselines3 reports them: return, final model progress and
    the env's own success flag (the model's number is not the task's)."""

    returns: list[float] = field(default_factory=list)
    final_progress: list[float] = field(default_factory=list)
    env_success: list[bool] = field(default_factory=list)

    def callback(self) -> Any:
        from stable_baselines3.common.callbacks import BaseCallback

        ledger = self

        class Record(BaseCallback):
            def _on_step(self) -> bool:
                for info in self.locals["infos"]:
                    if "episode" in info:  # a finished episode (RecordEpisodeStatistics)
                        ledger.returns.append(float(info["episode"]["r"]))
                        ledger.final_progress.append(float(info["progress"]))
                        ledger.env_success.append(bool(info.get("is_success", False)))
                return True

        return Record()


def train(
    timesteps: int = 4096,
    envs: int = 4,
    endpoint: str | None = None,
    seed: int = 0,
    reward_model: dict[str, Any] | None = None,
) -> tuple[Any, EpisodeLedger]:
    """Train PPO for ``timesteps`` steps on ``envs`` subprocess envs (``reward_model``: more keys
    of the config's ``reward_model`` block, e.g. ``{"call_every": 5}``); returns the model and
    the ledger of finished episodes."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import SubprocVecEnv

    ledger = EpisodeLedger()
    with reward_service(endpoint) as url:
        vec = SubprocVecEnv([make_thunk(url, seed + i, reward_model) for i in range(envs)])
        try:
            model = PPO("MlpPolicy", vec, n_steps=256, batch_size=256, seed=seed, verbose=0)
            model.learn(total_timesteps=timesteps, callback=ledger.callback())
        finally:
            vec.close()
    return model, ledger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--endpoint", default=None, help="reward service URL (default: mock)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    _, ledger = train(args.timesteps, args.envs, args.endpoint, args.seed)
    returns, progress = np.array(ledger.returns), np.array(ledger.final_progress)
    gap = np.abs(returns - progress / 100).max() if len(returns) else float("nan")
    success = np.array(ledger.env_success, dtype=float)
    print(
        f"{len(returns)} episodes: mean return {returns.mean():.3f}, mean final progress "
        f"{progress.mean():.1f} % (the reward model's), env success {success.mean():.2f} (the "
        f"env's own flag), largest |return - progress/100| {gap:.2e}"
    )


if __name__ == "__main__":
    main()
