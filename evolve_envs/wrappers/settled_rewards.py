"""SettledRewards: a vector env's rollout with the rewards ``calls: sync`` would have paid.

>>> from evolve_envs import make_vec
>>> vec = SettledRewards(make_vec("reach_place", num_envs=2, max_episode_steps=6,
...                               reward_model={"calls": "deferred"}))
>>> _ = vec.reset(seed=0)
>>> for _ in range(8):
...     _ = vec.step(vec.action_space.sample())
>>> rollout = vec.settle()
>>> rollout.rewards.shape, rollout.valid[:6].all(), bool(rollout.truncated[5].all())
((8, 2), np.True_, True)
>>> vec.close()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from evolve_envs.progress.settled_episode import SettledEpisode
from evolve_envs.wrappers.progress_reward import DEFERRED, REWARD_TIMING, ProgressReward

__all__ = ["SettledRewards", "SettledRollout", "deferred_reward", "settled_episodes"]


def deferred_reward(env: gym.Env) -> ProgressReward:
    """The reward wrapper that settles ``env``'s episodes: ``env`` declares
    ``metadata["reward_timing"] == "deferred"`` and holds a
    :class:`~evolve_envs.wrappers.progress_reward.ProgressReward`, found by its type.

    Raises ``ValueError`` naming what is missing otherwise."""
    if env.metadata.get(REWARD_TIMING) != DEFERRED:
        raise ValueError(
            "the env does not declare deferred rewards (metadata reward_timing: "
            f"{env.metadata.get(REWARD_TIMING)!r}); its stack needs a progress reward model "
            "with reward_model.calls: deferred"
        )
    inner: gym.Env = env
    while not isinstance(inner, ProgressReward):
        if not isinstance(inner, gym.Wrapper):
            raise ValueError(f"{env} declares deferred rewards but holds no ProgressReward")
        inner = inner.env
    return inner


def settled_episodes(env: gym.Env, wait: bool = False) -> list[SettledEpisode]:
    """The settled episodes of one env stack (``calls: deferred``), rewarded by its reward
    step: :meth:`evolve_envs.wrappers.progress_reward.ProgressReward.settled_episodes`."""
    return deferred_reward(env).settled_episodes(wait)


@dataclass(frozen=True)
class SettledRollout:
    """The vector steps ``start, start + 1, ...`` since the previous :meth:`SettledRewards.settle`,
    one row per step, one column per sub-env."""

    start: int
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray
    episodes: list[tuple[int, SettledEpisode]] = field(default_factory=list)


class SettledRewards(gym.vector.VectorWrapper):
    """Rows of settled rewards and done flags for a vector env of deferred stacks
    (docs/wrappers.md has a runnable example)."""

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        mode = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
        if mode != gym.vector.AutoresetMode.NEXT_STEP:
            raise ValueError(f"SettledRewards needs next-step autoreset (the default), got {mode}")
        try:
            calls = {getattr(settings, "calls", None) for settings in env.get_attr("settings")}
        except AttributeError:
            calls = {None}
        if calls != {"deferred"}:
            raise ValueError(
                "SettledRewards: every sub-env must be a ProgressReward stack with "
                f"reward_model.calls: deferred (found calls: {sorted(map(str, calls))})"
            )
        self._rows: list[np.ndarray] = []  # per vector step: [num_envs, 2] (episode, step)
        self._start = 0

    # gymnasium's VectorWrapper does not forward these
    def call(self, name: str, *args: object, **kwargs: object) -> tuple[object, ...]:
        return self.env.call(name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple[object, ...]:
        return self.env.get_attr(name)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, object]]:
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        self._rows.append(self._row(info))
        return obs, rewards, terminated, truncated, info

    def _row(self, info: dict[str, object]) -> np.ndarray:
        row = np.full((self.num_envs, 2), -1, np.int64)
        if "episode_number" not in info:  # a step past an episode's end: not a row of one
            return row
        mask = np.asarray(info.get("_episode_number", np.ones(self.num_envs, bool)))
        row[mask, 0] = np.asarray(info["episode_number"])[mask]
        row[mask, 1] = np.asarray(info["episode_step"])[mask]
        return row

    def settle(self) -> SettledRollout:
        """Wait for every answer sent so far and return the rows since the previous call."""
        finals = self.env.call("settled_episodes", True)
        running = self.env.call("running_episode", True)
        records: dict[tuple[int, int], SettledEpisode] = {}
        episodes = []
        for i, eps in enumerate(finals):
            for ep in eps:
                records[(i, ep.index)] = ep
                episodes.append((i, ep))
        for i, ep in enumerate(running):
            if ep is not None:
                records[(i, ep.index)] = ep
        n, m = len(self._rows), self.num_envs
        rewards = np.zeros((n, m))
        terminated, truncated, valid = (np.zeros((n, m), bool) for _ in range(3))
        for g, row in enumerate(self._rows):
            for i, (k, t) in enumerate(row):
                ep = records.get((i, int(k)))
                if ep is None or t < 1 or t > ep.length:
                    continue
                valid[g, i] = True
                rewards[g, i] = ep.rewards[t - 1]
                terminated[g, i] = ep.terminated and t == ep.length
                truncated[g, i] = ep.truncated and t == ep.length
        rollout = SettledRollout(self._start, rewards, terminated, truncated, valid, episodes)
        self._start += n
        self._rows = []
        return rollout

    def episodes(self, wait: bool = False) -> list[tuple[int, SettledEpisode]]:
        """Whole settled episodes ``(sub-env index, episode)``, oldest first per sub-env
        (``wait``: every episode that has ended). Use this or :meth:`settle`, not both: each
        episode is handed on once (and a :meth:`settle` after it covers the rows since)."""
        self._start += len(self._rows)
        self._rows = []
        found = self.env.call("settled_episodes", wait)
        return [(i, ep) for i, eps in enumerate(found) for ep in eps]
