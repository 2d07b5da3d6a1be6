"""Progress rewards for RLinf's vectorised environments (LIBERO and others of the same shape).

RLinf (``pip install rlinf``) steps ``N`` sub-envs at once through ``chunk_step(actions[N, C, A])``
and returns ``obs_list`` (``C`` observation dicts with ``main_images[N, H, W, 3]``,
``wrist_images``, ``states``, ``task_descriptions``), ``rewards[N, C]``, ``terminations[N, C]``,
``truncations[N, C]`` (torch tensors) and ``infos_list``. :class:`RLinfProgressReward` wraps such
an env object and, after every (chunk) step, feeds each sub-env's ``main_images`` frame to that
sub-env's :class:`~evolve_envs.progress.tracker.ProgressTracker`; it returns the same shapes with

* ``rewards = env_reward_weight * env_reward + reward_weight * model_reward`` (defaults 0 and 1:
  the model reward replaces the env's),
* ``terminations`` OR-ed with the reward model's done decision (``terminate_on_done``),

hands the reward model upright frames whatever the env emits (RLinf's LIBERO env emits them
turned 180°: :mod:`evolve_envs.integrations.rlinf.frames`), and keeps RLinf's semantics:

* **auto-reset** (``env.auto_reset``): RLinf marks an episode's end on the chunk's last action and
  resets the sub-env after the chunk; the tracker ends there too (the terminal frame comes from
  ``infos["final_observation"]``) and restarts on the reset frame. A sub-env that the reward model
  ends mid-chunk is reset at the chunk's end as the env resets its own (``reset(env_idx,
  reset_state_ids)``, new reset state ids with ``use_fixed_reset_state_ids``), with
  ``final_observation`` / ``final_info`` filled for it. An evaluation env (``is_eval``) draws its
  reset states itself, so there the model may report done but not terminate.
* **ignore_terminations** (``env.ignore_terminations``): episodes run to truncation; the model's
  done decision is reported in ``infos`` (``done_by_progress``) but never terminates.
* **no auto-reset** (RLinf's GRPO setting): after an episode ends the sub-env keeps stepping until
  the rollout epoch's reset; those steps get the env's reward part only (GRPO masks them anyway).

The attributes RLinf reads from its env are forwarded to the wrapped env by name
(``is_start``, ``update_reset_state_ids``, ``flush_video``, ``seed``, …); anything else, such
as ``offload``, is found by ``get_wrapper_attr`` (RLinf's ``get_env_attr``), which walks down
the wrapper stack as Gymnasium's does.

Info keys added to every ``infos`` dict of the chunk (``progress``, ``reward_model_reward``,
``env_reward``, ``done_by_progress``) and to RLinf's ``episode`` blocks (the episode's progress,
model return and calls, the audit of model termination, the alarm's numbers, and ``return`` /
``reward`` of the rewards this wrapper returns) are listed in
:mod:`evolve_envs.integrations.rlinf.env_state`, which keeps each sub-env's episode state.
:mod:`evolve_envs.integrations.rlinf.stack` builds the trackers from a ``reward_model`` block.

In a YAML run the wrapper is installed by :mod:`evolve_envs.integrations.rlinf.worker` from the
``env.train.reward_model`` block; see docs/rlinf.md, "3. Add a `reward_model` block to your RLinf
config". This module imports
neither RLinf nor torch at import time.

Example (needs RLinf's LIBERO env, so not run as a doctest; tests/integrations/rlinf runs the
same calls on a stand-in env)::

    >>> from rlinf.envs.libero.libero_env import LiberoEnv  # doctest: +SKIP
    >>> env = LiberoEnv(cfg, num_envs=8, seed_offset=0, total_num_processes=1,
    ...                 worker_info=None)  # doctest: +SKIP
    >>> env = RLinfProgressReward.from_config(
    ...     env, {"enable": True, "endpoint": "http://127.0.0.1:8111", "start_step": 64,
    ...           "call_every": 16})  # doctest: +SKIP
    >>> obs, infos = env.reset()  # doctest: +SKIP
    >>> obs_list, rewards, terms, truncs, infos_list = env.chunk_step(actions)  # doctest: +SKIP
    >>> infos_list[-1]["progress"].shape  # doctest: +SKIP
    torch.Size([8])
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from evolve_envs.integrations.rlinf.env_state import (
    SubEnvEpisodes,
    annotate,
    frame_getter,
    task_of,
    write_episode_block,
)
from evolve_envs.integrations.rlinf.frames import resolve as resolve_orientation
from evolve_envs.integrations.rlinf.resets import (
    check_resets_sub_envs,
    env_success_flags,
    final_mask,
    reset_ended,
)
from evolve_envs.integrations.rlinf.stack import build_progress_stack, enabled_block
from evolve_envs.progress.hacking import HackingDetector
from evolve_envs.progress.tracker import ProgressTracker, TrackerStep
from evolve_envs.train.arrays import like, to_numpy, torch_of
from evolve_envs.wrappers.success_bonus import bonus_paid

__all__ = ["RLinfProgressReward", "wrap_env_from_config"]

logger = logging.getLogger(__name__)

TrackerFactory = Callable[[int], ProgressTracker]


# ---------------------------------------------------------------------------- small helpers


def _as_index_list(env_idx: Any, num_envs: int) -> list[int]:
    if env_idx is None:
        return list(range(num_envs))
    arr = to_numpy(env_idx)
    if arr.dtype == bool:
        return [int(i) for i in np.flatnonzero(arr)]
    return [int(i) for i in np.atleast_1d(arr)]


def _forwarded(name: str) -> property:
    """A read-only attribute that reads ``name`` from the wrapped env (absent when it is)."""

    def get(self: RLinfProgressReward) -> Any:
        return getattr(self.env, name)

    return property(get, doc=f"The wrapped env's ``{name}``.")


# ---------------------------------------------------------------------------- the wrapper


class RLinfProgressReward:
    """Apply progress rewards/termination to an RLinf vectorised env (see module docstring).

    Args:
        env: the RLinf env object (``LiberoEnv`` or a wrapper around it) with ``num_envs``,
            ``reset(env_idx=None, reset_state_ids=None)`` and ``chunk_step`` / ``step``.
        trackers: one :class:`ProgressTracker` per sub-env, or a factory ``i -> tracker``.
        reward_weight: weight of the reward model's reward.
        env_reward_weight: weight of the wrapped env's reward.
        image_key: observation key of the frames sent to the reward model.
        frame_orientation: how the env's frames are turned (``auto``: from the env; see
            :mod:`~evolve_envs.integrations.rlinf.frames`); the reward model gets them upright.
        task_key: observation key of the per-sub-env instruction texts.
        max_workers: threads that step sync-mode trackers in parallel (their requests overlap,
            and the service batches them); default ``min(num_envs, 64)``. Async-mode trackers
            only submit to their client's workers, so they are stepped on the calling thread.
        model_terminates: the reward model's done decision terminates episodes (False: it is
            only reported in ``infos["done_by_progress"]``; ``reward_model.ignore_terminations``).
        on_close: callables run by :meth:`close` (e.g. closing a client or stopping a service).
        alarm: a :class:`~evolve_envs.progress.hacking.HackingDetector` fed every finished
            episode (its numbers go to the ``episode`` block); ``None``: no alarm.

    ``RLinfProgressReward(libero_env, [model.tracker() for _ in range(n)])`` with ``model`` from
    :func:`evolve_envs.stack.reward_model.open_reward_model`; usually :meth:`from_config`.

    Example (two sub-envs whose frames get 64 grey levels brighter each step, against a local
    mock service whose *intensity* rule reads grey level ``g`` as progress ``100 g/255``)::

        >>> import torch
        >>> from evolve_envs.reward.clients.progress_client import ProgressClient
        >>> from evolve_envs.reward.service.embedded import EmbeddedService
        >>> from evolve_envs.progress.settings import TrackerSettings
        >>> class Brighter:  # the shape of RLinf's LiberoEnv, without a simulator
        ...     num_envs, auto_reset, ignore_terminations = 2, False, False
        ...     def reset(self, env_idx=None, reset_state_ids=None):
        ...         self.t = 0
        ...         return self._obs(), {}
        ...     def chunk_step(self, actions):
        ...         obs_list = []
        ...         for _ in range(actions.shape[1]):
        ...             self.t += 1
        ...             obs_list.append(self._obs())
        ...         zeros = torch.zeros((2, actions.shape[1]))
        ...         return obs_list, zeros, zeros.bool(), zeros.bool(), [{} for _ in obs_list]
        ...     def _obs(self):
        ...         frames = torch.full((2, 32, 32, 3), min(64 * self.t, 255), dtype=torch.uint8)
        ...         return {"main_images": frames, "task_descriptions": ["light up"] * 2}
        >>> svc = EmbeddedService("mock", {"rule": "intensity"}).start()
        >>> client = ProgressClient(svc.url)
        >>> settings = TrackerSettings(start_step=2, call_every=2, milestone_every=2)
        >>> env = RLinfProgressReward(Brighter(), lambda i: ProgressTracker(client, settings))
        >>> obs, infos = env.reset()
        >>> obs_list, rewards, terms, truncs, infos_list = env.chunk_step(torch.zeros((2, 4, 7)))
        >>> rewards[0].tolist(), infos_list[-1]["progress"].tolist()  # 50 at step 2, 100 at 4
        ([0.0, 0.5, 0.0, 0.5], [100.0, 100.0])
        >>> terms[:, -1].tolist()  # done: progress >= 95
        [True, True]
        >>> env.close(); client.close(); svc.stop()
    """

    def __init__(
        self,
        env: Any,
        trackers: Sequence[ProgressTracker] | TrackerFactory,
        *,
        reward_weight: float = 1.0,
        env_reward_weight: float = 0.0,
        image_key: str = "main_images",
        task_key: str = "task_descriptions",
        max_workers: int | None = None,
        model_terminates: bool = True,
        on_close: Sequence[Callable[[], Any]] = (),
        alarm: HackingDetector | None = None,
        success_bonus: float = 0.0,
        success_threshold: float = 0.95,
        frame_orientation: str = "auto",
    ) -> None:
        self.env = env
        self.frame_orientation = resolve_orientation(frame_orientation, env)
        self.success_bonus = float(success_bonus)
        self.success_threshold = float(success_threshold)
        self.alarm = alarm
        self.model_terminates = bool(model_terminates)
        num_envs = getattr(env, "num_envs", None)
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise TypeError(f"env must expose a positive int num_envs, got {num_envs!r}")
        self._n = int(num_envs)
        if callable(trackers) and not isinstance(trackers, Sequence):
            trackers = [trackers(i) for i in range(self._n)]
        if len(trackers) != self._n:
            raise ValueError(f"need one tracker per sub-env: {len(trackers)} for {self._n} envs")
        self.trackers: list[ProgressTracker] = list(trackers)
        self.reward_weight = float(reward_weight)
        self.env_reward_weight = float(env_reward_weight)
        self.image_key = image_key
        self.task_key = task_key
        self.episodes = SubEnvEpisodes(self.trackers, alarm)
        workers = max_workers if max_workers is not None else min(self._n, 64)
        sync = any(t.settings.calls == "sync" for t in self.trackers)
        self._pool = (
            ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="progress")
            if sync and self._n > 1
            else None
        )
        self._on_close = list(on_close)
        self._closed = False
        if (
            bool(getattr(env, "auto_reset", False))
            and self.model_terminates
            and any(t.settings.terminate_on_done for t in self.trackers)
            and not bool(getattr(env, "ignore_terminations", False))
        ):
            check_resets_sub_envs(env)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(
        cls, env: Any, reward_model: Any, *, environ: Mapping[str, str] | None = None
    ) -> RLinfProgressReward:
        """Wrap ``env`` as the ``reward_model`` block (mapping, OmegaConf node or YAML path)
        describes. The block must have ``enable: true`` and ``kind: progress``."""
        stack = build_progress_stack(reward_model, int(env.num_envs), environ=environ)
        return cls(
            env,
            stack.trackers,
            reward_weight=stack.reward_weight,
            env_reward_weight=stack.env_reward_weight,
            model_terminates=not stack.config.ignore_terminations,
            on_close=stack.on_close,
            alarm=stack.alarm,
            success_bonus=stack.config.success_bonus,
            success_threshold=stack.config.success_bonus_threshold,
        )

    # ------------------------------------------------------------------ forwarding
    # What RLinf reads from the env it built, named one by one: its ``EnvWorker`` sets
    # ``is_start``, calls ``update_reset_state_ids`` and, through ``get_env_attr``,
    # ``flush_video`` and ``offload``; its ``RecordVideo`` wrapper reads ``seed``, ``num_envs``,
    # ``task_descriptions``, ``capture_image``, ``cfg`` and ``metadata``; the reset state ids,
    # ``group_size`` and the reset modes describe the env to a launcher. Anything else is reached
    # with :meth:`get_wrapper_attr` (Gymnasium's walk down the wrapper stack).
    seed = _forwarded("seed")
    cfg = _forwarded("cfg")
    metadata = _forwarded("metadata")
    task_descriptions = _forwarded("task_descriptions")
    reset_state_ids = _forwarded("reset_state_ids")
    group_size = _forwarded("group_size")
    capture_image = _forwarded("capture_image")

    def get_wrapper_attr(self, name: str) -> Any:
        """``name`` from this wrapper, else from the env stack below it (Gymnasium's lookup,
        which RLinf's ``get_env_attr`` uses: ``offload``, ``flush_video``, ...)."""
        if hasattr(self, name):
            return getattr(self, name)
        inner = getattr(self.env, "get_wrapper_attr", None)
        try:
            return inner(name) if callable(inner) else getattr(self.env, name)
        except AttributeError as exc:
            raise AttributeError(
                f"{type(self).__name__} and the env it wraps have no attribute {name!r}"
            ) from exc

    @property
    def unwrapped(self) -> Any:
        return getattr(self.env, "unwrapped", self.env)

    @property
    def num_envs(self) -> int:
        return self._n

    @property
    def is_start(self) -> bool:
        return self.env.is_start

    @is_start.setter
    def is_start(self, value: bool) -> None:
        self.env.is_start = value

    def update_reset_state_ids(self, *args: Any, **kwargs: Any) -> Any:
        return self.env.update_reset_state_ids(*args, **kwargs)

    def flush_video(self, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self.env, "flush_video", None)
        return fn(*args, **kwargs) if callable(fn) else None

    @property
    def auto_reset(self) -> bool:
        return bool(getattr(self.env, "auto_reset", False))

    @property
    def ignore_terminations(self) -> bool:
        return bool(getattr(self.env, "ignore_terminations", False))

    # ------------------------------------------------------------------ env API
    def reset(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """Reset (all or ``env_idx`` sub-envs) and start their trackers on the reset frames."""
        obs, infos = self.env.reset(*args, **kwargs)
        env_idx = kwargs.get("env_idx", args[0] if args else None)
        self._start_episodes(obs, _as_index_list(env_idx, self._n))
        return obs, infos

    def step(self, actions: Any = None, auto_reset: bool = True):
        """One step of every sub-env (RLinf's ``step``): rewards/terminations shaped ``[N]``."""
        obs, rewards, terms, truncs, infos = self.env.step(actions, auto_reset=auto_reset)
        obs_l, rew, term, trunc, infos_l = self._process(
            [obs],
            rewards.reshape(-1, 1),
            terms.reshape(-1, 1),
            truncs.reshape(-1, 1),
            [infos],
            resets_done=bool(auto_reset) and self.auto_reset,
        )
        return obs_l[0], rew[:, 0], term[:, 0], trunc[:, 0], infos_l[0]

    def chunk_step(self, chunk_actions: Any):
        """``C`` steps of every sub-env: ``obs_list, rewards[N,C], terms[N,C], truncs[N,C],
        infos_list``, as RLinf's ``chunk_step``."""
        obs_list, rewards, terms, truncs, infos_list = self.env.chunk_step(chunk_actions)
        return self._process(
            list(obs_list), rewards, terms, truncs, list(infos_list), resets_done=self.auto_reset
        )

    def close(self) -> None:
        """Close the wrapped env, the tracker threads and what :meth:`from_config` opened."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        try:
            close = getattr(self.env, "close", None)
            if callable(close):
                close()
        finally:
            for fn in self._on_close:
                try:
                    fn()
                except Exception:  # noqa: BLE001 - closing must not mask the caller's error
                    logger.warning("closing reward model resources failed", exc_info=True)

    def __enter__(self) -> RLinfProgressReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _start_episodes(self, obs: Mapping[str, Any], idx: list[int]) -> None:
        images = obs[self.image_key]
        fallback_tasks = getattr(self.env, "task_descriptions", None)
        for i in idx:
            task = task_of(obs, self.task_key, i, fallback_tasks)
            self.episodes.start(i, task, frame_getter(images, i, self.frame_orientation)())

    def _observe_all(self, calls: list[tuple[int, dict[str, Any]]]) -> dict[int, TrackerStep]:
        def run(item: tuple[int, dict[str, Any]]) -> tuple[int, TrackerStep]:
            i, kw = item
            return i, self.trackers[i].observe(**kw)

        if len(calls) <= 1 or self._pool is None:
            return dict(map(run, calls))
        return dict(self._pool.map(run, calls))

    def _process(
        self,
        obs_list: list[Any],
        rewards: Any,
        terms: Any,
        truncs: Any,
        infos_list: list[Any],
        *,
        resets_done: bool,
    ):
        n, c = self._n, len(obs_list)
        env_rewards = rewards
        term_np = to_numpy(terms, bool)
        trunc_np = to_numpy(truncs, bool)
        if term_np.shape != (n, c) or trunc_np.shape != (n, c):
            raise ValueError(
                f"expected terminations/truncations of shape {(n, c)}, got "
                f"{term_np.shape} / {trunc_np.shape}"
            )
        ignore_terms = self.ignore_terminations or not self.model_terminates
        last_infos = infos_list[-1] if isinstance(infos_list[-1], Mapping) else {}
        final_obs = last_infos.get("final_observation") if resets_done else None
        env_success = env_success_flags(infos_list, n)
        env_r = to_numpy(env_rewards, np.float64)

        model_r = np.zeros((n, c), dtype=np.float64)
        bonus_r = np.zeros((n, c), dtype=np.float64)  # the success bonus, on an episode's end
        progress = np.zeros((n, c), dtype=np.float32)
        done_flag = np.zeros((n, c), dtype=bool)
        model_term = np.zeros((n, c), dtype=bool)
        snapshots: list[dict[str, np.ndarray]] = []  # episode statistics after each step

        for t in range(c):
            images = obs_list[t][self.image_key]
            if t == c - 1 and final_obs is not None:
                mask = final_mask(last_infos, n)
                final_images = final_obs[self.image_key]
            else:
                mask, final_images = None, None
            calls: list[tuple[int, dict[str, Any]]] = []
            for i in range(n):
                if self.trackers[i].episode_over:
                    continue
                src = final_images if mask is not None and mask[i] else images
                self.episodes.steps[i] += 1
                calls.append(
                    (
                        i,
                        {
                            "step": int(self.episodes.steps[i]),
                            "frame": frame_getter(src, i, self.frame_orientation),
                            "env_terminated": bool(term_np[i, t]),
                            "env_truncated": bool(trunc_np[i, t]),
                            "env_success": (
                                None if env_success[t] is None else bool(env_success[t][i])
                            ),
                        },
                    )
                )
            for i, out in self._observe_all(calls).items():
                model_r[i, t] = out.reward
                if out.summary is not None:
                    self.episodes.record_end(i, out.summary)
                    if self.success_bonus > 0:
                        bonus_r[i, t] = bonus_paid(
                            out.summary, self.success_bonus, self.success_threshold
                        )
                self.episodes.returns[i] += (
                    self.env_reward_weight * env_r[i, t]
                    + self.reward_weight * out.reward
                    + bonus_r[i, t]
                )
                if out.terminate and not ignore_terms:
                    model_term[i, t] = True
            snapshots.append(self.episodes.stats_arrays())
            progress[:, t] = snapshots[-1]["progress"]
            done_flag[:, t] = snapshots[-1]["done_by_progress"]

        # Terminations: the env's, OR the model's. With auto-reset / ignore_terminations RLinf
        # reports an end on the chunk's last action only; do the same.
        out_terms = term_np.copy()
        if resets_done or self.ignore_terminations:
            out_terms[:, -1] |= model_term.any(axis=1)
        else:
            out_terms |= model_term

        env_done_at_end = term_np[:, -1] | trunc_np[:, -1]
        if resets_done:
            need_reset = model_term.any(axis=1) & ~env_done_at_end
            if need_reset.any():
                obs_list[-1], infos_list[-1] = reset_ended(
                    self.env, need_reset, obs_list[-1], infos_list[-1]
                )
            restart = [i for i in range(n) if env_done_at_end[i] or need_reset[i]]
            if restart:
                final_info = infos_list[-1].get("final_info")
                if isinstance(final_info, dict) and isinstance(final_info.get("episode"), dict):
                    write_episode_block(final_info["episode"], snapshots[-1])
                self._start_episodes(obs_list[-1], restart)

        annotate(infos_list, env_r, model_r, progress, done_flag, snapshots)

        mixed = self.env_reward_weight * env_r + self.reward_weight * model_r + bonus_r
        rewards_t, terms_t = torch_of(env_rewards), torch_of(terms)
        rewards_out = like(mixed, env_rewards, rewards_t) if rewards_t else mixed.astype(np.float32)
        terms_out = like(out_terms, terms, terms_t, is_bool=True)
        return obs_list, rewards_out, terms_out, truncs, infos_list


def wrap_env_from_config(env: Any, env_cfg: Any) -> Any:
    """Wrap ``env`` with :class:`RLinfProgressReward` if ``env_cfg.reward_model.enable`` is true.

    ``env_cfg`` is RLinf's ``env.train`` (or ``env.eval``) node. Returns ``env`` unchanged when
    the block is missing, disabled or RLinf's own (``stack.reward_model_block``).
    """
    block = enabled_block(env_cfg)
    return env if block is None else RLinfProgressReward.from_config(env, block)
