"""A bonus for episodes the reward model judges done at their end, around any reward wrapper.

``make_env`` gives the bonus to the reward wrapper's own reward step
(``reward_model.success_bonus``); this wrapper adds it to a stack built by hand, from
``info["episode_reward_model"]``. A stack whose rewards are settled later
(``metadata["reward_timing"] == "deferred"``) is refused: its bonus belongs to its reward step,
which pays it when the episode is settled.

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

import gymnasium as gym
from gymnasium.core import ActType, ObsType

from evolve_envs.progress.reward_step import RewardTerms
from evolve_envs.wrappers.progress_reward import DEFERRED, REWARD_TIMING

__all__ = ["ModelSuccessBonus", "refuse_deferred"]


def refuse_deferred(env: gym.Env, wrapper: str, setting: str) -> None:
    """Raise ``ValueError`` when ``env`` declares its rewards settled later: a wrapper that
    changes each step's reward would change what the trainer never sees."""
    if env.metadata.get(REWARD_TIMING) == DEFERRED:
        raise ValueError(
            f"{wrapper}: this stack's rewards are settled later (reward_model.calls: deferred), "
            f"so a reward changed as the step returns never reaches the trainer; set {setting} "
            "in the reward_model block instead (the reward wrapper's own reward step pays it)"
        )


class ModelSuccessBonus(gym.Wrapper):
    """Add ``bonus`` to the reward of an episode's last step when the reward model's final
    progress (``info["episode_reward_model"]["progress"]``, percent) is ``>= 100 * threshold``."""

    def __init__(self, env: gym.Env, bonus: float, threshold: float) -> None:
        refuse_deferred(env, "ModelSuccessBonus", "reward_model.success_bonus")
        super().__init__(env)
        self.terms = RewardTerms(success_bonus=float(bonus), bonus_threshold=float(threshold))

    @property
    def bonus(self) -> float:
        return self.terms.success_bonus

    @property
    def threshold(self) -> float:
        return self.terms.bonus_threshold

    def step(self, action: ActType) -> tuple[ObsType, float, bool, bool, dict[str, object]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            paid = self.terms.bonus(info.get("episode_reward_model"))
            info = {**info, "success_bonus": paid}
            reward = float(reward) + paid
        return obs, reward, terminated, truncated, info
