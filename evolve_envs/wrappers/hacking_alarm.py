"""HackingAlarm: the reward-hacking detector as a Gymnasium wrapper."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import SupportsFloat

import gymnasium as gym
from gymnasium.core import ActType, ObsType

from evolve_envs.progress.episode_summary import model_score
from evolve_envs.progress.hacking import HackingDetector, HackingDetectorConfig
from evolve_envs.progress.settled_episode import SettledEpisode
from evolve_envs.progress.task_text import task_text

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
        gym.Wrapper.__init__(self, env)
        self.detector = detector if detector is not None else HackingDetector(settings, **overrides)
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

    def settled_episodes(self, wait: bool = False) -> list[SettledEpisode]:
        """``calls: deferred``: the settled episodes of the stack below, each fed to the
        detector as it is handed on (in the order played), its state in ``.alarm``."""
        out = []
        for ep in self.env.get_wrapper_attr("settled_episodes")(wait):
            score = model_score(ep.summary, self.detector.settings.score)
            if ep.final and score is not None:
                success = bool(ep.summary.get("is_success", False))
                task = self.task if self.task is not None else ep.task
                ep = dataclasses.replace(ep, alarm=self.detector.add(task, score, success))
            out.append(ep)
        return out

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, object]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if (terminated or truncated) and self._open:
            self._open = False
            summary = info.get("episode_reward_model") or {}
            score = model_score(summary, self.detector.settings.score)
            if score is not None and self._task is not None:
                success = bool(info.get("is_success", summary.get("is_success", False)))
                info["reward_alarm"] = self.detector.add(self._task, score, success)
        return obs, reward, terminated, truncated, info
