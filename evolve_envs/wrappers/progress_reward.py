"""ProgressReward: rewards and termination from a progress reward model (EVOLVE-VLA / VLAC).

A thin Gymnasium wrapper around :class:`evolve_envs.progress.tracker.ProgressTracker`,
which holds the whole contract (schedule, milestones, modes, sync/async calls, done, reward modes,
settlement); read its module docstring for the semantics. This wrapper

* takes the task text from ``info["task_description"]`` at reset (or ``task=``),
* feeds the tracker the chosen camera's frame after every step,
* mixes rewards: ``env_reward_weight · env_reward + reward_weight · model_reward`` (defaults 0 and
  1: the model reward replaces LIBERO's; ``1, 1`` adds them; ``1, 0`` keeps the env's),
* terminates when the env does or when the tracker decides progress-done,
* fills ``info`` (docs/wrappers.md, "`info` keys"): ``progress``, ``progress_calls``,
  ``progress_checked``, ``progress_pending``, ``reward_model_latency_s``, ``reward_model_errors``,
  ``reward_model_fallback``, ``done_by_progress``, ``is_success``, ``env_reward``,
  ``reward_model_reward`` and, on the last step, ``episode_reward_model``.

The reward model comes from :func:`evolve_envs.open_reward_model`, the one way to open one: it
starts an embedded service when asked, opens the endpoint pool and the client, and checks the
service (a dead, refusing or foreign service fails there, in one line). Handed the open model, the
wrapper takes its client, its progress settings and the service's capabilities (settings the
backend cannot serve, e.g. ``mode="pairwise"`` on a progress-only backend, are refused with
:class:`~evolve_envs.progress.settings.ConfigError`) and closes the model after the env. A
progress client opened elsewhere (a test double, a trainer's own client) is lent:
``ProgressReward(env, lend(client))`` (:func:`~evolve_envs.wrappers.model_handle.lend`); it
stays the caller's.

Put the time limit *below* this wrapper so truncation reaches it and the episode is settled.

With ``calls: deferred`` a step never waits for the reward model: the reward returned is the env
part alone (``env_reward_weight · env_reward``), and :meth:`ProgressReward.settled_episodes`
hands on each episode once its last answer is in, with the reward ``sync`` would have paid at
every step (model and env parts) and the steps cut after a model done. ``info`` carries
``settlement_episode`` (the episode's number) and ``settlement_step`` (its step) in every mode.

Example: an env whose camera frame gets 64 grey levels brighter each step, against a local mock
service whose *intensity* rule reads a flat grey frame of level ``g`` as progress ``100 g/255``::

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

import dataclasses
import logging
import warnings
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.core import ActType, ObsType

from evolve_envs.progress.settings import TrackerSettings
from evolve_envs.progress.settled_episode import SettledEpisode
from evolve_envs.progress.task_text import task_text
from evolve_envs.progress.tracker import ProgressTracker
from evolve_envs.wrappers.model_handle import OpenModel, check_open_model

__all__ = ["ProgressReward", "StandInModelWarning", "stand_in"]

logger = logging.getLogger(__name__)

#: Backends whose judgement is a hand-written rule, not a learned model.
STAND_IN_BACKENDS = ("mock",)


class StandInModelWarning(UserWarning):
    """A stand-in reward model (the ``mock`` backend's rules) ended an episode."""


def stand_in(capabilities: Any) -> str | None:
    """The model id of a stand-in backend (``mock-change``), ``None`` for a learned model or
    when the service did not say.

    Example:
        >>> from types import SimpleNamespace as Caps
        >>> stand_in(Caps(backend="mock", model_id="mock-change")), stand_in(Caps(backend="vlac"))
        ('mock-change', None)
    """
    backend = getattr(capabilities, "backend", None)
    if backend not in STAND_IN_BACKENDS:
        return None
    return getattr(capabilities, "model_id", None) or str(backend)


class ProgressReward(
    gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs
):
    """Reward and terminate from a progress reward model (see module docstring).

    Args:
        env: the env (with its time limit inside).
        model: an open reward model (from :func:`evolve_envs.open_reward_model`, or a client
            lent with :func:`~evolve_envs.wrappers.model_handle.lend`); closed after the env.
        settings: :class:`~evolve_envs.progress.settings.TrackerSettings` or a
            mapping of them (default: the reward model's, else the defaults).
        camera: observation key of the frames sent to the reward model (``None``: the
            observation is the image); a tuple of keys sends them stacked (``K x H x W x 3``),
            for a client that averages over cameras
            (:class:`~evolve_envs.reward.clients.camera_average.CameraAverageClient`).
        task: task text; default ``info["task_description"]`` at reset.
        reward_weight: weight of the model reward.
        env_reward_weight: weight of the wrapped env's reward.
        capabilities: the service's capabilities, to check the settings against (default: the
            reward model's; None for a lent client: not checked).
        **setting_overrides: individual :class:`TrackerSettings` fields, e.g. ``start_step=8``.

    The module docstring has a runnable example. Settings can also be given one by one:
    ``ProgressReward(env, model, mode="trajectory", calls="async", max_lag_steps=8,
    reward_mode="sparse")``.
    """

    def __init__(
        self,
        env: gym.Env[ObsType, ActType],
        model: OpenModel,
        settings: TrackerSettings | Mapping[str, Any] | None = None,
        *,
        camera: str | tuple[str, ...] | None = "agentview_image",
        task: str | None = None,
        reward_weight: float = 1.0,
        env_reward_weight: float = 0.0,
        capabilities: Any = None,
        **setting_overrides: Any,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            settings=settings,
            camera=camera,
            task=task,
            reward_weight=reward_weight,
            env_reward_weight=env_reward_weight,
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
            settings = TrackerSettings()
        elif isinstance(settings, Mapping):
            settings = TrackerSettings.from_mapping(settings)
        if setting_overrides:
            settings = settings.replace(**setting_overrides)
        self.client = client
        self.camera = camera
        self.task = task
        self.reward_weight = float(reward_weight)
        self.env_reward_weight = float(env_reward_weight)
        self.capabilities = capabilities
        try:  # the tracker refuses settings the backend cannot serve (pairwise on progress-only)
            self.tracker = ProgressTracker(client, settings, capabilities=capabilities)
        except BaseException:
            model.close()  # a refused construction closes what it was handed
            raise
        self.episode_step = 0
        self._warned_after_end = False
        self._last_info: dict[str, Any] = {}
        self.model_id: str | None = getattr(capabilities, "model_id", None) or getattr(
            capabilities, "backend", None
        )
        self.stand_in = stand_in(capabilities)
        self._warned_stand_in = False
        self._env_rewards: dict[int, list[float]] = {}  # deferred: per episode, per step

    @property
    def settings(self) -> TrackerSettings:
        return self.tracker.settings

    def _frame(self, obs: Any) -> np.ndarray:
        if self.camera is None:
            return np.asarray(obs)
        if isinstance(self.camera, tuple):  # several cameras: stacked, K x H x W x 3
            return np.stack([self._one_frame(obs, camera) for camera in self.camera])
        return self._one_frame(obs, self.camera)

    @staticmethod
    def _one_frame(obs: Any, camera: str) -> np.ndarray:
        if not isinstance(obs, Mapping) or camera not in obs:
            keys = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
            raise KeyError(f"ProgressReward: observation has no camera key {camera!r} ({keys})")
        return np.asarray(obs[camera])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        if self._deferred and not self.tracker.episode_over:  # dropped, as under sync
            self._env_rewards.pop(self.tracker.episodes, None)
        self.tracker.reset(task_text(self.env, self.task, info, "ProgressReward"), self._frame(obs))
        self.episode_step = 0
        self._warned_after_end = False
        info.setdefault("is_success", False)
        info.update(self.tracker.step_info())
        info["reward_model_id"] = self.model_id
        if self._deferred:
            self._env_rewards[self.tracker.episodes] = []
        info.update(settlement_episode=self.tracker.episodes, settlement_step=0)
        return obs, info

    @property
    def _deferred(self) -> bool:
        return self.tracker.settings.calls == "deferred"

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
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
            return obs, self.env_reward_weight * float(env_reward), terminated, truncated, info

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
        info.update(settlement_episode=self.tracker.episodes, settlement_step=self.episode_step)
        self._last_info = dict(out.info)
        self._last_info.pop("episode_reward_model", None)
        reward = self.env_reward_weight * float(env_reward) + self.reward_weight * out.reward
        return obs, reward, bool(terminated or out.terminate), bool(truncated), info

    def settled_episodes(self, wait: bool = False) -> list[SettledEpisode]:
        """``calls: deferred``: the episodes settled since the last call, in the order played
        (``wait``: wait for the answers of every episode that has ended).

        Each record's ``rewards`` are this wrapper's rewards as ``sync`` pays them,
        ``env_reward_weight · env_reward + reward_weight · model_reward`` per step up to
        ``length`` (the steps cut after a model done are left out); ``model_rewards`` is the
        model part. Wrappers above that add to the reward (``ModelSuccessBonus``) add theirs
        when asked through them: call ``env.get_wrapper_attr("settled_episodes")`` on the
        outermost env, or :func:`evolve_envs.wrappers.settled.settled_episodes`."""
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
        env_part = np.zeros(ep.length) if env is None else np.asarray(env[: ep.length], float)
        rewards = self.env_reward_weight * env_part + self.reward_weight * ep.model_rewards
        return dataclasses.replace(ep, rewards=rewards)

    def close(self) -> None:
        """Close the env, then the reward model this wrapper was handed (if any)."""
        model, self.reward_model = self.reward_model, None
        try:
            super().close()
        finally:
            if model is not None:
                model.close()
