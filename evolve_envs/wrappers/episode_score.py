"""EpisodeScoreReward: one reward-model score per episode, paid at its end (RLinf-RLAIF style).

Example: CartPole with a flat grey camera picture (level 204, which the local mock service's
*intensity* rule scores 0.8), scored once at the end of a 3-step episode:

    >>> import gymnasium as gym
    >>> import numpy as np
    >>> from evolve_envs.reward.clients.pickle_scorer_client import PickleScorerClient
    >>> from evolve_envs.reward.service.hosting.embedded import EmbeddedService
    >>> from evolve_envs.wrappers.frame_cache import FrameCache
    >>> svc = EmbeddedService("mock", {"rule": "intensity"}).start()
    >>> grey = gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)
    >>> picture = lambda _: np.full(grey.shape, 204, np.uint8)
    >>> env = gym.wrappers.TransformObservation(
    ...     gym.make("CartPole-v1", max_episode_steps=3), picture, grey)
    >>> from evolve_envs.wrappers.model_handle import lend
    >>> client = PickleScorerClient(svc.url)
    >>> env = EpisodeScoreReward(FrameCache(env, camera=None), lend(client),
    ...                          task="balance the pole", binary_reward=False)
    >>> _ = env.reset(seed=0)
    >>> [env.step(0)[1] for _ in range(3)]           # paid on the last step
    [0.0, 0.0, 0.8]
    >>> env.close(); client.close(); svc.stop()
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.core import ActType, ObsType

from evolve_envs.progress.episode_summary import EpisodeSummary
from evolve_envs.progress.hacking import HackingDetector, HackingDetectorConfig
from evolve_envs.progress.reward_step import RewardStep, RewardTerms
from evolve_envs.progress.task_text import task_text
from evolve_envs.wrappers.frame_cache import FrameStore, find_frame_store
from evolve_envs.wrappers.model_handle import OpenModel, check_open_model
from evolve_envs.wrappers.progress_reward import alarm_of

__all__ = ["EpisodeScoreReward"]

logger = logging.getLogger(__name__)

ScorerKind = Literal["video_score", "pickle_scorer"]


class EpisodeScoreReward(
    gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs
):
    """Pay a reward-model score of the whole episode on its last step (docs/wrappers.md), with
    the success bonus and the hacking alarm of its
    :class:`~evolve_envs.progress.reward_step.RewardStep` (as ``ProgressReward``)."""

    def __init__(
        self,
        env: gym.Env[ObsType, ActType],
        model: OpenModel,
        *,
        kind: ScorerKind | None = None,
        task: str | None = None,
        binary_reward: bool = True,
        success_threshold: float = 0.5,
        reward_coef: float = 1.0,
        use_rel_reward: bool = False,
        ignore_terminations: bool = False,
        last_frames: int = 1,
        reward_weight: float = 1.0,
        env_reward_weight: float = 0.0,
        success_key: str = "is_success",
        success_bonus: float = 0.0,
        success_bonus_threshold: float = 0.95,
        alarm: HackingDetector | HackingDetectorConfig | Mapping[str, object] | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            kind=kind,
            task=task,
            binary_reward=binary_reward,
            success_threshold=success_threshold,
            reward_coef=reward_coef,
            use_rel_reward=use_rel_reward,
            ignore_terminations=ignore_terminations,
            last_frames=last_frames,
            reward_weight=reward_weight,
            env_reward_weight=env_reward_weight,
            success_key=success_key,
            success_bonus=success_bonus,
            success_bonus_threshold=success_bonus_threshold,
        )
        gym.Wrapper.__init__(self, env)
        # the open model: its client; the wrapper closes it after the env
        self.reward_model: OpenModel | None = check_open_model(model, "EpisodeScoreReward")
        client = model.client
        if kind is None:
            kind = "video_score" if hasattr(client, "nframes") else "pickle_scorer"
        if kind not in ("video_score", "pickle_scorer"):
            raise ValueError(f"kind must be 'video_score' or 'pickle_scorer', got {kind!r}")
        if last_frames < 1:
            raise ValueError(f"last_frames must be >= 1, got {last_frames}")
        store = find_frame_store(env)
        if store is None:
            raise ValueError(
                "EpisodeScoreReward needs a FrameCache below it "
                "(evolve_envs.wrappers.frame_cache.FrameCache)"
            )
        self.frame_store: FrameStore = store
        self.client = client
        self.kind: ScorerKind = kind
        self.task = task
        self.binary_reward = bool(binary_reward)
        self.success_threshold = float(success_threshold)
        self.reward_coef = float(reward_coef)
        self.use_rel_reward = bool(use_rel_reward)
        self.ignore_terminations = bool(ignore_terminations)
        self.last_frames = int(last_frames)
        terms = RewardTerms(
            float(reward_weight),
            float(env_reward_weight),
            float(success_bonus),
            float(success_bonus_threshold),
        )
        self.reward_step = RewardStep(terms, alarm_of(alarm), task)
        self.success_key = success_key
        self._task_text = ""
        self._scored: dict[str, object] | None = None
        self._errors = 0

    # ------------------------------------------------------------------ scoring
    def _request(self) -> Any:
        store = self.frame_store
        if self.kind == "video_score":
            _, frames = store.sample(int(getattr(self.client, "nframes", 16)))
            return self.client.score(self._task_text, frames)
        frames = store.frames(store.steps[-self.last_frames :])
        return self.client.score(frames, [self._task_text] * len(frames))

    def _score_episode(self, success: bool) -> EpisodeSummary:
        result = self._request()  # a fail-fast client raises RewardServiceError here
        raw: float | None = None
        if result.ok and result.value is not None:
            value = result.value
            raw = float(np.mean(value)) if isinstance(value, list | tuple) else float(value)
        fallback = raw is None
        if fallback:
            self._errors += 1
        score = float(success) if fallback else float(raw)
        if self.binary_reward:
            score = 1.0 if score >= self.success_threshold else 0.0
        judged = (float(success) if fallback else float(raw)) >= self.success_threshold
        self._episode_score = score
        summary: EpisodeSummary = {
            "progress": 100.0 * score,  # one scale for every kind: percent of the task
            "max_progress": 100.0 * score,
            "raw_score": raw,
            "fallback": fallback,
            "error": result.error if fallback else None,
            "latency_s": float(result.latency_s),
            "frames": len(self.frame_store),
            "steps": self.frame_store.last_step,
            "reward_model_errors": self._errors,
            "model_reward": self.reward_coef * score,
            "is_success": bool(success),
            "high_progress_on_failure": bool(judged and not success and not fallback),
            "success_at_low_progress": bool(success and not judged and not fallback),
        }
        return summary

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[ObsType, dict[str, object]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._task_text = task_text(self.env, self.task, info, "EpisodeScoreReward")
        self._scored = None
        self._errors = 0
        info.setdefault(self.success_key, False)
        info.update(
            {
                "reward_model_errors": 0,
                "reward_model_fallback": False,
                "reward_model_latency_s": 0.0,
            }
        )
        return obs, info

    def step(self, action: ActType) -> tuple[ObsType, float, bool, bool, dict[str, object]]:
        obs, env_reward, terminated, truncated, info = self.env.step(action)
        success = bool(info.get(self.success_key, False))
        info.setdefault(self.success_key, success)
        info["env_reward"] = float(env_reward)
        if self.ignore_terminations:
            info["env_terminated"] = bool(terminated)
            terminated = False
        model_reward = 0.0
        fallback = False
        latency = 0.0
        bonus = 0.0
        if self._scored is not None:  # stepping on after the scored end (RLinf chunk semantics)
            model_reward = 0.0 if self.use_rel_reward else self._scored["model_reward"]
        elif terminated or truncated:
            self._scored = self._score_episode(success)
            model_reward = self._scored["model_reward"]
            fallback = self._scored["fallback"]
            latency = self._scored["latency_s"]
            info["episode_score"] = self._episode_score
            info["episode_reward_model"] = dict(self._scored)
            end = self.reward_step.end(self._scored, self._task_text, success)
            bonus = end.bonus or 0.0
            info.update(end.info())
        info["reward_model_reward"] = model_reward
        info["reward_model_errors"] = self._errors
        info["reward_model_fallback"] = fallback
        info["reward_model_latency_s"] = latency
        reward = self.reward_step.terms.mix(float(env_reward), model_reward, bonus)
        return obs, reward, bool(terminated), bool(truncated), info

    def close(self) -> None:
        """Close the env, then the reward model this wrapper was handed (if any)."""
        model, self.reward_model = self.reward_model, None
        try:
            super().close()
        finally:
            if model is not None:
                model.close()
