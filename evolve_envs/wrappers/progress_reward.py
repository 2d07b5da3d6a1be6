"""ProgressReward: rewards and termination from a progress reward model (EVOLVE-VLA / VLAC).

Example: an env whose camera frame gets 64 grey levels brighter each step, against a local mock
service whose *intensity* rule reads a flat grey frame of level ``g`` as progress ``100 g/255``:

    >>> import gymnasium as gym
    >>> import numpy as np
    >>> from evolve_envs.reward.service.hosting.embedded import EmbeddedService
    >>> class Brighter(gym.Env):
    ...     observation_space = gym.spaces.Dict(
    ...         {"agentview_image": gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)})
    ...     action_space = gym.spaces.Discrete(2)
    ...     def reset(self, *, seed=None, options=None):
    ...         self.t = 0
    ...         return self._obs(), {"task_description": "light up the scene"}
    ...     def step(self, action):
    ...         self.t += 1
    ...         return self._obs(), 0.0, False, False, {}
    ...     def _obs(self):
    ...         return {"agentview_image": np.full((32, 32, 3), min(64 * self.t, 255), np.uint8)}
    >>> from evolve_envs import open_reward_model
    >>> svc = EmbeddedService("mock", {"rule": "intensity"}).start()
    >>> model = open_reward_model({"enable": True, "endpoint": svc.url, "start_step": 2,
    ...                            "call_every": 2, "milestone_every": 2})
    >>> env = ProgressReward(gym.wrappers.TimeLimit(Brighter(), 8), model)
    >>> obs, info = env.reset(seed=0)
    >>> info["progress"], info["task_description"]
    (0.0, 'light up the scene')
    >>> steps = [env.step(0) for _ in range(4)]
    >>> [round(r, 2) for _, r, _, _, _ in steps]      # progress 50 at step 2, 100 at step 4
    [0.0, 0.5, 0.0, 0.5]
    >>> _, _, terminated, truncated, info = steps[-1]  # done: progress >= 95
    >>> terminated, truncated, info["progress_calls"], info["episode_reward_model"]["progress"]
    (True, False, 2, 100.0)
    >>> env.close(); svc.stop()  # closes the model, then the service is stopped
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping

import gymnasium as gym
import numpy as np
from gymnasium.core import ActType, ObsType

from evolve_envs.envs.libero_render import camera_frame
from evolve_envs.progress.hacking import HackingDetector, HackingDetectorConfig
from evolve_envs.progress.reward_step import RewardStep, RewardTerms
from evolve_envs.progress.settled_episode import SettledEpisode
from evolve_envs.progress.task_text import task_text
from evolve_envs.progress.tracker import ProgressTracker
from evolve_envs.progress.tracker_config import TrackerConfig
from evolve_envs.reward.protocol.wire import Capabilities
from evolve_envs.wrappers.model_handle import OpenModel, check_open_model

__all__ = [
    "DEFERRED",
    "REWARD_TIMING",
    "ProgressReward",
    "StandInModelWarning",
    "alarm_of",
    "stand_in",
]

#: The ``env.metadata`` key that declares when an env's rewards are final, as
#: ``autoreset_mode`` declares how it resets: :data:`DEFERRED` (``reward_model.calls:
#: deferred``: the rewards a trainer learns from come with each settled episode, from
#: :meth:`ProgressReward.settled_episodes`), absent otherwise (each step's reward is final).
REWARD_TIMING = "reward_timing"
DEFERRED = "deferred"

logger = logging.getLogger(__name__)

#: Backends whose judgement is a hand-written rule, not a learned model.
STAND_IN_BACKENDS = ("mock",)


class StandInModelWarning(UserWarning):
    """A stand-in reward model (the ``mock`` backend's rules) ended an episode."""


def stand_in(capabilities: Capabilities | Mapping[str, object] | None) -> str | None:
    """The model id of a stand-in backend (``mock-change``), ``None`` for a learned model or
    when the service did not say.

        >>> from types import SimpleNamespace as Caps
        >>> stand_in(Caps(backend="mock", model_id="mock-change")), stand_in(Caps(backend="vlac"))
        ('mock-change', None)
    """
    backend = getattr(capabilities, "backend", None)
    if backend not in STAND_IN_BACKENDS:
        return None
    return getattr(capabilities, "model_id", None) or str(backend)


def alarm_of(
    alarm: HackingDetector | HackingDetectorConfig | Mapping[str, object] | None,
) -> HackingDetector | None:
    """A hacking alarm's detector from a detector, its settings, or None (no alarm)."""
    if alarm is None or isinstance(alarm, HackingDetector):
        return alarm
    return HackingDetector(alarm)


class ProgressReward(
    gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs
):
    """Reward and terminate from a progress reward model (docs/wrappers.md). Its rewards come
    from one :class:`~evolve_envs.progress.reward_step.RewardStep`: the weights, the success
    bonus (``success_bonus`` when the final progress reaches ``success_bonus_threshold``) and
    the hacking alarm (``alarm``), whether a step pays as it returns or an episode is settled
    later (``calls: deferred``, declared as ``metadata["reward_timing"] == "deferred"``)."""

    def __init__(
        self,
        env: gym.Env[ObsType, ActType],
        model: OpenModel,
        settings: TrackerConfig | Mapping[str, object] | None = None,
        *,
        camera: str | tuple[str, ...] | None = "agentview_image",
        task: str | None = None,
        reward_weight: float = 1.0,
        env_reward_weight: float = 0.0,
        success_bonus: float = 0.0,
        success_bonus_threshold: float = 0.95,
        alarm: HackingDetector | HackingDetectorConfig | Mapping[str, object] | None = None,
        capabilities: Capabilities | Mapping[str, object] | None = None,
        **setting_overrides: object,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            settings=settings,
            camera=camera,
            task=task,
            reward_weight=reward_weight,
            env_reward_weight=env_reward_weight,
            success_bonus=success_bonus,
            success_bonus_threshold=success_bonus_threshold,
            **setting_overrides,
        )
        gym.Wrapper.__init__(self, env)
        # the open model: its client, settings and capabilities; the wrapper closes it
        self.reward_model: OpenModel | None = check_open_model(model, "ProgressReward")
        client = model.client
        if settings is None:
            settings = model.settings
        if capabilities is None:
            capabilities = model.capabilities
        if settings is None:
            settings = TrackerConfig()
        elif isinstance(settings, Mapping):
            settings = TrackerConfig.from_mapping(settings)
        if setting_overrides:
            settings = settings.replace(**setting_overrides)
        self.client = client
        self.camera = camera
        self.task = task
        self.capabilities = capabilities
        try:  # the tracker refuses settings the backend cannot serve (pairwise on progress-only)
            terms = RewardTerms(
                float(reward_weight),
                float(env_reward_weight),
                float(success_bonus),
                float(success_bonus_threshold),
            )
            self.reward_step = RewardStep(terms, alarm_of(alarm), task)
            self.tracker = ProgressTracker(client, settings, capabilities=capabilities)
        except BaseException:
            model.close()  # a refused construction closes what it was handed
            raise
        if self._deferred:  # declared, as autoreset_mode is: rewards come with settled episodes
            self.metadata = {**self.env.metadata, REWARD_TIMING: DEFERRED}
        self._task: str | None = None
        self.episode_step = 0
        self._warned_after_end = False
        self._last_info: dict[str, object] = {}
        self.model_id: str | None = getattr(capabilities, "model_id", None) or getattr(
            capabilities, "backend", None
        )
        self.stand_in = stand_in(capabilities)
        self._warned_stand_in = False
        self._env_rewards: dict[int, list[float]] = {}  # deferred: per episode, per step

    @property
    def settings(self) -> TrackerConfig:
        return self.tracker.settings

    @property
    def reward_weight(self) -> float:
        return self.reward_step.terms.reward_weight

    @property
    def env_reward_weight(self) -> float:
        return self.reward_step.terms.env_reward_weight

    def _frame(self, obs: ObsType) -> np.ndarray:
        if self.camera is None:
            return np.asarray(obs)
        if isinstance(self.camera, tuple):  # several cameras: stacked, K x H x W x 3
            return np.stack([self._one_frame(obs, camera) for camera in self.camera])
        return self._one_frame(obs, self.camera)

    def _one_frame(self, obs: ObsType, camera: str) -> np.ndarray:
        if not isinstance(obs, Mapping) or camera not in obs:
            keys = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
            raise KeyError(f"ProgressReward: observation has no camera key {camera!r} ({keys})")
        return camera_frame(self.env, obs, camera)  # drawn now by an env rendering on demand

    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[ObsType, dict[str, object]]:
        obs, info = self.env.reset(seed=seed, options=options)
        if self._deferred and not self.tracker.episode_over:  # dropped, as under sync
            self._env_rewards.pop(self.tracker.episodes, None)
        self._task = task_text(self.env, self.task, info, "ProgressReward")
        self.tracker.reset(self._task, self._frame(obs))
        self.episode_step = 0
        self._warned_after_end = False
        info.setdefault("is_success", False)
        info.update(self.tracker.step_info())
        info["reward_model_id"] = self.model_id
        if self._deferred:
            self._env_rewards[self.tracker.episodes] = []
        info.update(episode_number=self.tracker.episodes, episode_step=0)
        return obs, info

    @property
    def _deferred(self) -> bool:
        return self.tracker.settings.calls == "deferred"

    def step(self, action: ActType) -> tuple[ObsType, float, bool, bool, dict[str, object]]:
        obs, env_reward, terminated, truncated, info = self.env.step(action)
        self.episode_step += 1
        info.setdefault("is_success", False)
        info["env_reward"] = float(env_reward)
        if self.tracker.episode_over:
            # Stepping past the end of a settled episode: nothing more is owed.
            if not self._warned_after_end:
                logger.warning("ProgressReward: step() after the episode ended; call reset()")
                self._warned_after_end = True
            info["reward_model_reward"] = 0.0
            info["reward_model_id"] = self.model_id
            info.update(self._last_info)
            reward = self.reward_step.terms.mix(float(env_reward), 0.0)
            return obs, reward, terminated, truncated, info

        out = self.tracker.observe(
            self.episode_step,
            lambda: self._frame(obs),
            env_terminated=bool(terminated),
            env_truncated=bool(truncated),
            env_success=bool(info["is_success"]),
        )
        info.update(out.info)
        info["reward_model_id"] = self.model_id
        info["reward_model_reward"] = out.reward
        if out.terminate and not terminated and self.stand_in and not self._warned_stand_in:
            self._warned_stand_in = True  # once per env: the judge does not change
            warnings.warn(
                f"ProgressReward: a stand-in reward model ({self.stand_in}, a hand-written rule, "
                f"not a learned model) ended this episode at step {self.episode_step}; its "
                "'done' and progress say what the rule measures, not whether the task was done "
                f"(the env's is_success: {bool(info['is_success'])})",
                StandInModelWarning,
                stacklevel=2,
            )
        if self._deferred:
            self._env_rewards.setdefault(self.tracker.episodes, []).append(float(env_reward))
        info.update(episode_number=self.tracker.episodes, episode_step=self.episode_step)
        self._last_info = dict(out.info)
        self._last_info.pop("episode_reward_model", None)
        bonus = 0.0
        if out.summary is not None and not self._deferred:  # deferred: at settlement
            end = self.reward_step.end(out.summary, self._task, bool(info["is_success"]))
            bonus = end.bonus or 0.0
            info.update(end.info())
        reward = self.reward_step.terms.mix(float(env_reward), out.reward, bonus)
        return obs, reward, bool(terminated or out.terminate), bool(truncated), info

    def settled_episodes(self, wait: bool = False) -> list[SettledEpisode]:
        """``calls: deferred``: the episodes settled since the last call, in the order played
        (``wait``: wait for the answers of every episode that has ended), each rewarded by the
        reward step (the bonus on its last step, the alarm fed in the order played)."""
        return [self._with_env_part(ep) for ep in self.tracker.settled(wait)]

    def running_episode(self, wait: bool = True) -> SettledEpisode | None:
        """``calls: deferred``: the open episode's steps so far, rewards as in
        :meth:`settled_episodes` (see ``ProgressTracker.running_episode``)."""
        ep = self.tracker.running_episode(wait)
        return None if ep is None else self._with_env_part(ep)

    def deferred_stats(self) -> dict[str, int | float]:
        """``calls: deferred``: unsettled episodes, frame bytes held, saturation waits, answer
        timeouts, cut steps (``ProgressTracker.deferred_stats``)."""
        return self.tracker.deferred_stats()

    def _with_env_part(self, ep: SettledEpisode) -> SettledEpisode:
        env = self._env_rewards.pop(ep.index, []) if ep.final else self._env_rewards.get(ep.index)
        return self.reward_step.episode(ep, env)

    def close(self) -> None:
        """Close the env, then the reward model this wrapper was handed (if any)."""
        model, self.reward_model = self.reward_model, None
        try:
            super().close()
        finally:
            if model is not None:
                model.close()
