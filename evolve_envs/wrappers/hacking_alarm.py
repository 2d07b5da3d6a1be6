"""HackingAlarm: the reward-hacking detector as a Gymnasium wrapper, around any reward wrapper.

``make_env`` gives the alarm to the reward wrapper's own reward step (``reward_model.alarm``);
this wrapper adds it to a stack built by hand. A stack whose rewards are settled later
(``calls: deferred``) is refused: its episodes reach the alarm when they are settled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import SupportsFloat

import gymnasium as gym
from gymnasium.core import ActType, ObsType

from evolve_envs.progress.hacking import HackingDetector, HackingDetectorConfig
from evolve_envs.progress.reward_step import RewardStep
from evolve_envs.progress.task_text import task_text
from evolve_envs.wrappers.model_success_bonus import refuse_deferred

__all__ = ["HackingAlarm"]


class HackingAlarm(
    gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs
):
    """Feed each finished episode to a :class:`HackingDetector`; ``info["reward_alarm"]`` on the
    last step (docs/wrappers.md). Put it outside the reward wrapper (``ProgressReward`` or
    ``EpisodeScoreReward``), whose ``info["episode_reward_model"]`` it reads; ``make_env`` does
    so with ``reward_model.alarm.enable: true``.

        >>> class Scored(gym.Wrapper):
        ...     def step(self, action):
        ...         obs, reward, term, trunc, info = self.env.step(action)
        ...         if term or trunc:
        ...             info["episode_reward_model"] = {"progress": 80.0, "max_progress": 90.0}
        ...         return obs, reward, term, trunc, info
        >>> env = HackingAlarm(Scored(gym.make("CartPole-v1")), task="balance the pole",
        ...                    window=2, baseline=2)
        >>> _ = env.reset(seed=0)
        >>> done = False
        >>> while not done:
        ...     *_, term, trunc, info = env.step(0)
        ...     done = term or trunc
        >>> info["reward_alarm"]["episodes"], info["reward_alarm"]["ready"]
        (1, False)
    """

    def __init__(
        self,
        env: gym.Env[ObsType, ActType],
        settings: HackingDetectorConfig | Mapping[str, object] | None = None,
        *,
        detector: HackingDetector | None = None,
        task: str | None = None,
        **overrides: object,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, settings=settings, task=task, **overrides)
        refuse_deferred(env, "HackingAlarm", "reward_model.alarm")
        gym.Wrapper.__init__(self, env)
        self.detector = detector if detector is not None else HackingDetector(settings, **overrides)
        self.reward_step = RewardStep(alarm=self.detector, task=task)
        self.task = task
        self._task: str | None = None
        self._open = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[ObsType, dict[str, object]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._task = task_text(self.env, self.task, info, "HackingAlarm")
        self._open = True
        return obs, info

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, object]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if (terminated or truncated) and self._open:
            self._open = False
            summary = info.get("episode_reward_model") or {}
            success = info.get("is_success")
            flag = None if success is None else bool(success)
            info.update(self.reward_step.end(summary, self._task, flag).info())
        return obs, reward, terminated, truncated, info
