"""A bonus for episodes the reward model judges done at their end.

>>> import gymnasium as gym
>>> class Ends(gym.Env):
...     observation_space = action_space = gym.spaces.Discrete(2)
...     def reset(self, *, seed=None, options=None):
...         return 0, {}
...     def step(self, action):
...         return 0, 0.3, True, False, {"episode_reward_model": {"progress": 100.0}}
>>> env = ModelSuccessBonus(Ends(), bonus=1.0, threshold=0.95)
>>> _ = env.reset()
>>> env.step(0)[1]
1.3
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import gymnasium as gym
from gymnasium.core import ActType, ObsType

from evolve_envs.progress.settled_episode import SettledEpisode

__all__ = ["ModelSuccessBonus", "bonus_paid", "with_bonus"]


def bonus_paid(summary: Mapping[str, object] | None, bonus: float, threshold: float) -> float:
    """The bonus an episode earns from its reward-model summary: ``bonus`` when the final
    progress (percent) is at least ``100 * threshold``, else 0. Shared by the wrapper and the
    RLinf adapter, so both pay the same.

    >>> bonus_paid({"progress": 100.0}, 1.0, 0.95), bonus_paid({"progress": 90.0}, 1.0, 0.95)
    (1.0, 0.0)
    """
    if isinstance(summary, Mapping) and summary.get("progress") is not None:
        # rounded like the tracker's done rule, so accumulation noise cannot flip it
        if round(float(summary["progress"]) / 100.0, 9) >= threshold:
            return float(bonus)
    return 0.0


def with_bonus(ep: SettledEpisode, bonus: float, threshold: float) -> SettledEpisode:
    """A settled episode with the bonus added to its last step's reward (``calls: deferred``:
    the bonus the wrapper would have paid under ``sync``)."""
    if not ep.final or ep.length == 0:
        return ep
    paid = bonus_paid(ep.summary, bonus, threshold)
    rewards = ep.rewards.copy()
    rewards[-1] += paid
    return dataclasses.replace(ep, rewards=rewards)


class ModelSuccessBonus(gym.Wrapper):
    """Add ``bonus`` to the reward of an episode's last step when the reward model's final
    progress (``info["episode_reward_model"]["progress"]``, percent) is ``>= 100 * threshold``."""

    def __init__(self, env: gym.Env, bonus: float, threshold: float) -> None:
        super().__init__(env)
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        self.bonus = float(bonus)
        self.threshold = float(threshold)

    def step(self, action: ActType) -> tuple[ObsType, float, bool, bool, dict[str, object]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            paid = bonus_paid(info.get("episode_reward_model"), self.bonus, self.threshold)
            info = {**info, "success_bonus": paid}
            reward = float(reward) + paid
        return obs, reward, terminated, truncated, info

    def settled_episodes(self, wait: bool = False) -> list[SettledEpisode]:
        """``calls: deferred``: the reward wrapper's settled episodes with the bonus added
        (:func:`with_bonus`); under ``sync`` it is paid on the last step as the step returns."""
        inner = self.env.get_wrapper_attr("settled_episodes")(wait)
        return [with_bonus(ep, self.bonus, self.threshold) for ep in inner]
