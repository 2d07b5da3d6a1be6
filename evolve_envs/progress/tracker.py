"""ProgressTracker: the per-episode progress state machine, independent of Gymnasium.

One tracker follows one episode at a time. It owns every piece of the EVOLVE-VLA progress logic —
the check schedule, milestones, the three request modes, sync/async calls, done decisions, the
reward modes and the end-of-episode settlement — so that the Gymnasium wrapper
(:class:`evolve_envs.wrappers.progress_reward.ProgressReward`) and trainer integrations that step
many envs at once (one tracker per sub-env) share one implementation.

Protocol of use (one episode)::

    tracker.reset(task, first_frame)                  # frame 0, progress 0
    for t in 1, 2, ...:                               # after each env step
        out = tracker.observe(t, frame_t, env_terminated=term, env_truncated=trunc,
                              env_success=info.get("is_success"))
        reward_t = out.reward                         # model reward owed at step t
        if out.terminate: ...                         # the reward model judged the task done
        if out.episode_over: break                    # settled; out.summary holds the episode
    extra = tracker.finish()                          # only if the caller ends the episode itself

``frame`` may be an array or a zero-argument callable returning one; it is only materialised on
check steps. Step ``t`` counts env steps since ``reset`` (the first ``observe`` is step 1).

Modes (``TrackerSettings.mode``; all values are progress in [0, 100], frame 0 has progress 0):

* ``"pairwise"`` (EVOLVE-VLA's milestone critic): the check at ``t`` asks the critic between the
  *previous* milestone frame ``F_m`` (value ``V_m``) and ``o_t``; progress ``v_t = acc(V_m, c)``.
  At a milestone check (see :func:`~evolve_envs.progress.arithmetic.is_milestone`) ``v_t`` is
  committed: ``o_t`` becomes the milestone frame and ``v_t`` its value. Needs the ``pairwise``
  capability.
* ``"incremental"``: the critic between the previous check frame and ``o_t``, accumulated.
  Needs ``pairwise``.
* ``"trajectory"``: ``/trajectory-critic`` over the frames seen at check steps (step 0 and every
  check up to ``t``, at most ``trajectory_max_frames``, spread uniformly); progress is the last
  value. Works with progress-only backends (e.g. Robo-Dopamine).

Calls: ``"sync"`` — the check at ``t`` is answered before ``observe(t)`` returns, so it decides
step ``t``. ``"async"`` — the request is sent at ``t`` and ``observe`` returns at once; the answer
is applied (reward, progress, termination) at the first later step where it is back, and at the
latest at step ``t + max_lag_steps``, where the tracker waits for it. Answers are applied in the
order they were sent. When the episode ends (env termination/truncation, or progress-done), every
outstanding request is waited for and applied, so the episode's reward sum is exact in both modes.

Async timing. The tracker measures, across episodes, how long answers take (from the request to
the answer, seconds; the last 32) and how long an env step takes (between ``observe`` calls,
the tracker's own waits left out; the median of the last 64). Their ratio, the 95th percentile
of the latency over the median step, is the answer latency *in steps*, ``L``. Two settings use it:

* ``max_lag_steps="auto"``: a check's answer is waited for at the latest ``ceil(1.25·L) + 2``
  steps after it was sent (``4·call_every`` until a first answer is measured), so the env waits
  only on answers that are late for this service, never on answers that are on time.
* ``last_check="before_limit"`` with a known time limit ``T`` (``time_limit``, or
  ``reset(..., time_limit=T)``; :func:`episode_limit` reads it off a ``TimeLimit`` or
  ``ProgressiveHorizon``): checks whose answer is expected after the limit (sent after
  ``T − ceil(L) − 1``) are not sent on the grid; instead the last check is sent at the first
  step past that cutoff (skipped if the previous check is less than half an interval before),
  so its answer is back before the episode ends and the final step does not wait. Checks
  before the cutoff are the grid's; no check is ever added, at most the grid's late ones are
  replaced by one. Without a measured latency or a known limit the grid is used as is.

Either way every answer sent is applied (and waited for at the end if it is not back), so the
reward sum stays exact. The summary counts the answers waited for mid-episode (``lag_waits``)
and at the end (``end_waits``).

Done: ``done_by="threshold"`` — ``progress/100 {>=|>} done_threshold`` (``done_comparison``;
the fraction is rounded to 9 decimals first, so accumulation noise cannot flip it);
``"backend"`` — the service's ``/done`` answer (needs the ``done`` capability); ``"either"`` /
``"both"`` — OR / AND of the two; or any :class:`~evolve_envs.progress.done_rules.DoneRule` (k of
the last n checks above the threshold, the backend, and any/all combinations of rules). With
``terminate_on_done`` the decision ends the episode. Every settled episode is counted in the
tracker's :class:`~evolve_envs.progress.done_rules.TerminationAudit` (shareable between trackers):
the summary reports whether the model judged the episode done, whether the env had succeeded at that
moment, and the running counts and precision of model termination for the episode's task.

Rewards (model part, scaled by ``reward_coef``):

* ``"dense"`` — ``Δv/100`` whenever a check is applied (0 between), telescoping to the final
  progress/100;
* ``"sparse"`` — the final progress/100, paid at the episode's last step;
* ``"binary"`` — ``[final progress/100 >= success_threshold]``, paid at the last step.

``use_rel_reward`` (RLinf's definition: pay ``coef·score_t − coef·score_{t−1}``) makes sparse and
binary pay the change of their running score whenever a check is applied, instead of the final
value at the end; the episode sum is the same. Dense rewards are already relative.

Failures. A failed call (fallback result, service down) leaves progress unchanged and never
decides done; a failed milestone still moves the milestone frame, with the progress held at that
time as its value. With a client in fail-fast mode the :class:`~evolve_envs.reward.clients.errors.
RewardServiceError` propagates out of :meth:`observe`; the failed check is then accounted
exactly like a fallback (progress held, error counted), so a caller that catches the error can
keep stepping the episode and later checks work as soon as the service is back. When an episode
ends with more than ``failure_warn_fraction`` of its answers failed, a warning says so (with the
counts) on this module's logger.

Example (against a local mock service whose *intensity* rule reads a uniformly grey frame of
level ``g`` as progress ``round(100 * g / 255)``)::

    >>> import numpy as np
    >>> from evolve_envs.reward.clients.progress_client import ProgressClient
    >>> from evolve_envs.reward.service.embedded import EmbeddedService
    >>> svc = EmbeddedService("mock", {"rule": "intensity"}).start()
    >>> client = ProgressClient(svc.url)
    >>> settings = TrackerSettings(start_step=2, call_every=2, milestone_every=2)
    >>> tracker = ProgressTracker(client, settings)
    >>> grey = lambda level: np.full((32, 32, 3), level, np.uint8)
    >>> tracker.reset("open the drawer", grey(0))
    >>> tracker.observe(1, grey(64)).checked                 # not a check step
    False
    >>> out = tracker.observe(2, grey(128))                  # 128/255: progress 50
    >>> out.checked, out.progress, out.reward, out.info["progress_calls"]
    (True, 50.0, 0.5, 1)
    >>> out = tracker.observe(3, grey(191), env_truncated=True)  # the episode ends here
    >>> out.episode_over, out.summary["progress"], out.summary["model_reward"]
    (True, 50.0, 0.5)
    >>> client.close(); svc.stop()
"""

from __future__ import annotations

import collections
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from evolve_envs.progress.arithmetic import (
    accumulate,
    clamp_progress,
    is_check_step,
    is_milestone,
    reached,
)
from evolve_envs.progress.done_rules import TerminationAudit
from evolve_envs.progress.frames import uniform_indices
from evolve_envs.progress.settings import (
    CallMode,
    ConfigError,
    DoneBy,
    ProgressMode,
    RewardMode,
    TrackerSettings,
    check_capabilities,
)
from evolve_envs.reward.clients.errors import RewardServiceError

__all__ = [
    "ProgressMode",
    "RewardMode",
    "CallMode",
    "DoneBy",
    "TrackerSettings",
    "TrackerStep",
    "ProgressService",
    "ProgressTracker",
    "check_capabilities",
    "ConfigError",
    "episode_limit",
]

logger = logging.getLogger(__name__)

Frame = np.ndarray | Callable[[], np.ndarray]


class ProgressService(Protocol):
    """What the tracker needs from a progress client (``evolve_envs.reward.clients.ProgressClient``
    fits).

    Each method returns a ``Future`` of a result with ``value``, ``ok``, ``fallback``,
    ``latency_s`` and ``error`` (a ``evolve_envs.reward.clients.results.CallResult``).
    """

    def submit_pairwise_critic(
        self, task: str, image_a: np.ndarray, image_b: np.ndarray
    ) -> Future[Any]: ...

    def submit_trajectory_values(
        self, task: str, frames: list[np.ndarray], *, skip: int = ...
    ) -> Future[Any]: ...

    def submit_done(
        self, task: str, first_frame: np.ndarray, prev_frame: np.ndarray, curr_frame: np.ndarray
    ) -> Future[Any]: ...


@dataclass
class TrackerStep:
    """What :meth:`ProgressTracker.observe` returns for one step.

    Attributes:
        reward: model reward owed at this step (already scaled by ``reward_coef``; includes any
            settlement when the episode ends here).
        progress: progress in [0, 100] after every answer applied so far.
        terminate: the reward model ends the episode here (done decided, ``terminate_on_done``).
        episode_over: the episode is settled (env ended it, or ``terminate``).
        checked: at least one check answer was applied at this step.
        info: per-step info keys (see the README, "info keys"); at the end also
            ``"episode_reward_model"`` (= ``summary``).
        summary: the episode summary when ``episode_over``, else ``None``.
    """

    reward: float
    progress: float
    terminate: bool
    episode_over: bool
    checked: bool
    info: dict[str, Any]
    summary: dict[str, Any] | None = None


@dataclass
class _Pending:
    step: int
    base_step: int
    milestone: bool
    critic: Future[Any]
    done: Future[Any] | None = None
    deadline: int = 0  # the step at which the answer is waited for (async)
    sent_at: float = 0.0  # clock time of the request (async)
    answered_at: list[float] = field(default_factory=list)  # clock times of its answers

    def ready(self) -> bool:
        return self.critic.done() and (self.done is None or self.done.done())


@dataclass
class _Episode:
    task: str = ""
    first_frame: np.ndarray | None = None
    step: int = 0
    progress: float = 0.0
    max_progress: float = 0.0
    values: dict[int, float] = field(default_factory=lambda: {0: 0.0})
    frames: dict[int, np.ndarray] = field(default_factory=dict)
    check_frames: list[tuple[int, np.ndarray]] = field(default_factory=list)
    milestone_step: int = 0
    prev_check_step: int = 0
    last_sent_step: int = 0
    pending: collections.deque[_Pending] = field(default_factory=collections.deque)
    level_paid: float = 0.0
    calls: int = 0
    answers: int = 0
    errors: int = 0
    fallbacks: int = 0
    latency_total_s: float = 0.0
    latency_max_s: float = 0.0
    last_latency_s: float = 0.0
    last_error: str | None = None
    limit: int | None = None
    final_sent: bool = False
    left_at: float | None = None
    lag_waits: int = 0
    end_waits: int = 0
    done: bool = False
    done_step: int | None = None
    done_env_success: bool | None = None
    env_success: bool | None = None
    model_reward: float = 0.0
    finished: bool = False
    summary: dict[str, Any] | None = None


class ProgressTracker:
    """Per-episode progress state machine (see the module docstring for the full contract).

    Args:
        client: a progress client (:class:`ProgressService`), e.g.
            ``evolve_envs.reward.clients.progress_client.ProgressClient``.
        settings: :class:`TrackerSettings` (or a mapping of them).
        capabilities: the service's ``/capabilities`` answer; when given, the settings are
            checked against it (:func:`check_capabilities`). Ask the service once and share it.
        audit: the :class:`~evolve_envs.progress.done_rules.TerminationAudit` that counts this
            tracker's episodes (share one between the trackers of a vectorised env); default a new
            one.
        time_limit: the episodes' time limit in steps, or a zero-argument callable read at
            every :meth:`reset` (e.g. ``lambda: episode_limit(env)``); used by
            ``last_check="before_limit"``. Settable later as the attribute ``time_limit``.
        clock: seconds, monotonic (the async timing's clock; tests pass a fake one).

    The module docstring has a runnable example.

    """

    def __init__(
        self,
        client: ProgressService,
        settings: TrackerSettings | Mapping[str, Any] | None = None,
        *,
        capabilities: Any = None,
        audit: TerminationAudit | None = None,
        time_limit: int | Callable[[], int | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if settings is None:
            settings = TrackerSettings()
        elif isinstance(settings, Mapping):
            settings = TrackerSettings.from_mapping(settings)
        self.settings: TrackerSettings = settings
        if capabilities is not None:
            check_capabilities(settings, capabilities)
        self.client = client
        self._mode: _Mode = _MODES[settings.mode](settings)
        self._ep = _Episode(finished=True)
        self.episodes = 0
        self.audit = audit if audit is not None else TerminationAudit()
        self._judge = settings.rule.judge()
        self.time_limit = time_limit
        self._timing = _Timing(clock)

    # ------------------------------------------------------------------ episode lifecycle
    @property
    def progress(self) -> float:
        """Current progress in [0, 100]."""
        return self._ep.progress

    @property
    def episode_over(self) -> bool:
        return self._ep.finished

    @property
    def pending(self) -> int:
        """Requests sent and not yet applied."""
        return len(self._ep.pending)

    def totals(self) -> dict[str, Any]:
        """Running totals of the current (or, once settled, the last) episode: ``progress``,
        ``max_progress``, ``done_by_progress``, ``model_reward`` (the model reward paid so far),
        ``progress_calls`` and ``reward_model_errors``."""
        ep = self._ep
        return {
            "progress": ep.progress,
            "max_progress": ep.max_progress,
            "done_by_progress": ep.done,
            "model_reward": ep.model_reward,
            "progress_calls": ep.calls,
            "reward_model_errors": ep.errors,
        }

    @property
    def kept_frames(self) -> dict[int, np.ndarray]:
        """The current episode's frames the tracker keeps as bases of later checks (step ->
        frame; step 0 is the reset frame). Read-only view for inspection."""
        return dict(self._ep.frames)

    @property
    def summary(self) -> dict[str, Any] | None:
        """The last settled episode's summary (``None`` while an episode runs)."""
        return self._ep.summary

    def latency_steps(self) -> float | None:
        """The answer latency in env steps the async schedule works with (95th percentile of
        the recent latencies over the median step time); ``None`` before both are measured."""
        return self._timing.latency_steps()

    def reset(self, task: str, first_frame: np.ndarray, *, time_limit: int | None = None) -> None:
        """Start a new episode for ``task`` whose first frame (step 0) is ``first_frame``.

        ``time_limit``: this episode's limit in steps (default: the tracker's ``time_limit``).
        An unfinished previous episode is abandoned: its outstanding requests are not waited for.
        """
        if not isinstance(task, str) or not task.strip():
            raise ValueError(f"task must be a non-empty string, got {task!r}")
        first = np.array(first_frame, copy=True)
        ep = _Episode(task=task, first_frame=first)
        ep.frames[0] = first
        ep.check_frames.append((0, first))
        ep.limit = time_limit if time_limit is not None else self._read_limit()
        self._ep = ep
        self._judge.reset()
        self.episodes += 1

    def observe(
        self,
        step: int,
        frame: Frame,
        *,
        env_terminated: bool = False,
        env_truncated: bool = False,
        env_success: bool | None = None,
    ) -> TrackerStep:
        """Account for env step ``step`` whose resulting frame is ``frame``.

        Sends the scheduled check, applies answers that are due, and — when the env ends the
        episode here or the reward model decides done — settles the episode.
        """
        ep = self._ep
        if ep.finished:
            raise RuntimeError("ProgressTracker.observe() without an open episode: call reset()")
        if step <= ep.step:
            raise ValueError(f"steps must increase: got {step} after {ep.step}")
        s = self.settings
        timed = s.calls == "async"
        if timed and ep.left_at is not None and step == ep.step + 1:
            self._timing.record_step(self._timing.clock() - ep.left_at)
        ep.step = int(step)
        if env_success is not None:
            ep.env_success = bool(env_success)
        holder = _FrameHolder(frame)
        reward = 0.0
        fallback_now = False
        applied = 0

        if self._check_now(step):
            self._send(step, holder)
        r, n, fb = self._apply_due(step)
        reward, applied, fallback_now = reward + r, applied + n, fallback_now or fb

        terminate = ep.done and s.terminate_on_done
        over = bool(env_terminated or env_truncated or terminate)
        if over:
            if s.check_at_episode_end and ep.last_sent_step != step:
                self._send(step, holder)
            r, n, fb = self._settle()
            reward, applied, fallback_now = reward + r, applied + n, fallback_now or fb
            terminate = ep.done and s.terminate_on_done

        info = self.step_info(applied > 0, fallback_now)
        if over:
            info["episode_reward_model"] = ep.summary
        elif timed:
            ep.left_at = self._timing.clock()
        return TrackerStep(
            reward=reward,
            progress=ep.progress,
            terminate=terminate,
            episode_over=over,
            checked=applied > 0,
            info=info,
            summary=ep.summary if over else None,
        )

    def finish(self) -> float:
        """Settle the episode now (caller ends it, e.g. a chunked rollout stops early).

        Waits for and applies outstanding requests; returns the model reward still owed (0.0 if
        the episode was already settled). The summary is then in :attr:`summary`.
        """
        if self._ep.finished:
            return 0.0
        reward, _, _ = self._settle()
        return reward

    # ------------------------------------------------------------------ schedule
    def _read_limit(self) -> int | None:
        limit = self.time_limit() if callable(self.time_limit) else self.time_limit
        return int(limit) if limit is not None else None

    def _check_now(self, step: int) -> bool:
        """Whether a check is sent at ``step``: the grid's, unless ``last_check="before_limit"``
        moves the late end of it (see the module docstring)."""
        s, ep = self.settings, self._ep
        grid = is_check_step(step, start_step=s.start_step, call_every=s.call_every)
        limit = ep.limit
        if s.last_check == "grid" or s.calls == "sync" or limit is None or step > limit:
            return grid
        if ep.final_sent or step < s.start_step:
            return False
        upcoming = step + (s.start_step - step) % s.call_every  # the next grid check >= step
        if upcoming > limit:
            return False
        lead = self._timing.lead_steps()
        if lead is None or step <= limit - lead:
            return grid
        # past the cutoff with a grid check still ahead: its answer would come after the limit,
        # so the last check is sent now, unless the previous one is recent enough to be it
        ep.final_sent = True
        return ep.last_sent_step == 0 or 2 * (step - ep.last_sent_step) >= s.call_every

    def _deadline(self, step: int) -> int:
        """The step at which the answer to the check sent at ``step`` is waited for."""
        s = self.settings
        if s.calls == "sync":
            return step
        if s.max_lag_steps != "auto":
            return step + s.max_lag_steps
        latency = self._timing.latency_steps()
        if latency is None:
            return step + 4 * s.call_every
        return step + _ceil(1.25 * latency) + 2

    # ------------------------------------------------------------------ requests
    def _send(self, step: int, holder: _FrameHolder) -> None:
        ep, s = self._ep, self.settings
        frame = holder.get()
        base, milestone, future = self._mode.send(self._call, ep, step, frame)
        done_future = None
        if s.needs_done:
            assert ep.first_frame is not None
            prev = ep.frames.get(base, ep.first_frame)
            done_future = self._call("done", ep.task, ep.first_frame, prev, frame)
        ep.calls += 1 + (done_future is not None)
        pending = _Pending(step, base, milestone, future, done_future, self._deadline(step))
        if s.calls == "async":
            self._timing.track(pending)
        ep.pending.append(pending)
        ep.last_sent_step = step
        self._mode.keep(ep, step, frame, milestone)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Future[Any]:
        """Ask the client: in sync mode directly on this thread (the answer is needed before
        ``observe`` returns anyway), in async mode through its ``submit_*`` twin. Either way
        the answer is a future, so both modes apply answers the same way."""
        direct = getattr(self.client, method, None) if self.settings.calls == "sync" else None
        if direct is None:
            return getattr(self.client, f"submit_{method}")(*args, **kwargs)
        future: Future[Any] = Future()
        try:
            future.set_result(direct(*args, **kwargs))
        except RewardServiceError as exc:  # fail-fast mode: raised where the answer is applied
            future.set_exception(exc)
        return future

    def _apply_due(self, step: int) -> tuple[float, int, bool]:
        """Apply answers in send order: those back, and those that reached the max lag."""
        ep, s = self._ep, self.settings
        reward, applied, fallback = 0.0, 0, False
        while ep.pending:
            head = ep.pending[0]
            if not head.ready():
                if s.calls == "sync" or step < head.deadline:
                    break
                ep.lag_waits += 1
            r, fb = self._apply(ep.pending.popleft())
            reward, applied, fallback = reward + r, applied + 1, fallback or fb
        return reward, applied, fallback

    def _apply(self, p: _Pending) -> tuple[float, bool]:
        ep = self._ep
        answered = False
        try:
            result = p.critic.result()  # raises RewardServiceError in fail-fast mode
            done_result = p.done.result() if p.done is not None else None
            answered = True
        finally:
            self._timing.answered(p)
            if not answered:  # whatever raised (an interrupt too): hold the progress
                self._hold_failed(p, sys.exc_info()[1])
        fallback = False
        for res in (result, done_result):
            if res is None:
                continue
            ep.answers += 1
            latency = float(getattr(res, "latency_s", 0.0) or 0.0)
            ep.latency_total_s += latency
            ep.latency_max_s = max(ep.latency_max_s, latency)
            ep.last_latency_s = latency
            if not getattr(res, "ok", True):
                ep.errors += 1
                ep.last_error = getattr(res, "error", None)
                if getattr(res, "fallback", False):
                    ep.fallbacks += 1
                    fallback = True

        # a failed answer holds progress
        value = self._mode.value(ep, p, result.value) if result.ok else ep.progress
        self._commit(p, value)

        reward = self._reward_for(value)
        ep.progress = value
        ep.max_progress = max(ep.max_progress, value)
        if self._decide_done(value, result, done_result) and not ep.done:
            ep.done = True
            ep.done_step = ep.step
            ep.done_env_success = ep.env_success
        return reward, fallback

    def _decide_done(self, value: float, result: Any, done_result: Any) -> bool:
        """The done decision for one applied answer: the progress threshold (a failed answer
        has no vote) and the backend's ``/done`` go to the done rule's judge
        (:mod:`evolve_envs.progress.done_rules`), which decides."""
        s = self.settings
        above = (
            reached(_fraction(value), s.done_threshold, s.done_comparison) if result.ok else None
        )
        by_backend = (
            bool(done_result.value.done)
            if done_result is not None and done_result.ok and done_result.value is not None
            else None
        )
        return self._judge.update(above=above, backend=by_backend)

    def _commit(self, p: _Pending, value: float) -> None:
        """Record ``value`` as the progress of the check's frame when the mode keeps it as a
        base for later checks, and forget values no later check can use."""
        ep = self._ep
        if self._mode.commits(p):
            ep.values[p.step] = value
            for old in [k for k in ep.values if 0 < k < p.base_step]:
                del ep.values[old]

    def _hold_failed(self, p: _Pending, exc: BaseException | None) -> None:
        """Account a check whose request raised (fail-fast mode) like a failed answer: the
        progress is held and becomes the value of the check's frame, so later checks that use
        that frame as their base find a value."""
        ep = self._ep
        ep.answers += 1
        ep.errors += 1
        ep.last_error = str(exc) if exc is not None else "the request did not complete"
        self._commit(p, ep.progress)

    def _level(self, value: float) -> float:
        s = self.settings
        if s.reward_mode == "binary":
            return s.reward_coef * float(_fraction(value) >= s.success_threshold)
        return s.reward_coef * value / 100.0

    def _reward_for(self, value: float) -> float:
        """Model reward owed when progress moves from the current value to ``value``."""
        ep, s = self._ep, self.settings
        if s.reward_mode == "dense":
            r = s.reward_coef * (value - ep.progress) / 100.0
        elif s.use_rel_reward:
            level = self._level(value)
            r, ep.level_paid = level - ep.level_paid, level
        else:
            r = 0.0
        ep.model_reward += r
        return r

    def _settle(self) -> tuple[float, int, bool]:
        ep, s = self._ep, self.settings
        reward, applied, fallback = 0.0, 0, False
        ep.end_waits += sum(1 for p in ep.pending if s.calls == "async" and not p.ready())
        while ep.pending:
            r, fb = self._apply(ep.pending.popleft())
            reward, applied, fallback = reward + r, applied + 1, fallback or fb
        if s.reward_mode != "dense" and not s.use_rel_reward:
            final = self._level(ep.progress)
            reward += final
            ep.model_reward += final
        ep.finished = True
        self.audit.record(
            ep.task,
            model_done=ep.done,
            success_at_done=ep.done_env_success,
            env_success=ep.env_success,
        )
        ep.summary = self._summary()
        self._warn_if_failing()
        return reward, applied, fallback

    def _warn_if_failing(self) -> None:
        ep = self._ep
        if ep.answers and ep.errors / ep.answers > self.settings.failure_warn_fraction:
            logger.warning(
                "reward model: %d of %d answers failed in this episode (%d answered with the "
                "fallback), more than failure_warn_fraction=%g: progress was held at those "
                "checks. Last error: %s",
                ep.errors,
                ep.answers,
                ep.fallbacks,
                self.settings.failure_warn_fraction,
                ep.last_error,
            )

    # ------------------------------------------------------------------ reporting
    def step_info(self, checked: bool = False, fallback: bool = False) -> dict[str, Any]:
        """The per-step ``info`` keys for the episode's current state (after ``reset``: zeros)."""
        ep = self._ep
        return {
            "progress": ep.progress,
            "progress_checked": checked,
            "progress_calls": ep.calls,
            "progress_pending": len(ep.pending),
            "reward_model_latency_s": ep.last_latency_s,
            "reward_model_errors": ep.errors,
            "reward_model_fallback": fallback,
            "done_by_progress": ep.done,
        }

    def _summary(self) -> dict[str, Any]:
        ep, s = self._ep, self.settings
        judged_done = reached(_fraction(ep.progress), s.done_threshold, s.done_comparison)
        success = ep.env_success
        return {
            "progress": ep.progress,
            "max_progress": ep.max_progress,
            "steps": ep.step,
            "progress_calls": ep.calls,
            "answers": ep.answers,
            "reward_model_errors": ep.errors,
            "reward_model_fallbacks": ep.fallbacks,
            "last_error": ep.last_error,
            "latency_mean_s": ep.latency_total_s / ep.answers if ep.answers else 0.0,
            "latency_max_s": ep.latency_max_s,
            "lag_waits": ep.lag_waits,
            "end_waits": ep.end_waits,
            "done_by_progress": ep.done,
            "done_step": ep.done_step,
            "model_reward": ep.model_reward,
            "is_success": success,
            "high_progress_on_failure": None if success is None else (judged_done and not success),
            "success_at_low_progress": None if success is None else (success and not judged_done),
            "task": ep.task,
            "done_rule": s.rule.describe(),
            "model_terminated": ep.done and s.terminate_on_done,
            "done_env_success": ep.done_env_success,
            "termination_audit": self.audit.counts(ep.task),
        }


def _fraction(progress: float) -> float:
    """Progress as a fraction, rounded to 9 decimals so that float noise of the accumulation
    (95.00000000000001) cannot flip a threshold comparison."""
    return round(progress / 100.0, 9)


def _ceil(steps: float) -> int:
    """``ceil`` that ignores float noise (36.0000000001 steps are 36)."""
    return math.ceil(round(steps, 6))


def episode_limit(env: Any) -> int | None:
    """The current time limit of a time-limit wrapper, read without importing Gymnasium: a
    ``ProgressiveHorizon``'s ``max_episode_steps`` (its current stage) or a ``TimeLimit``'s
    ``_max_episode_steps``; ``None`` for anything else.

    >>> import gymnasium as gym
    >>> episode_limit(gym.wrappers.TimeLimit(gym.make("CartPole-v1").unwrapped, 7))
    7
    """
    for name in ("max_episode_steps", "_max_episode_steps"):
        value = getattr(env, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class _Timing:
    """Async timing kept across episodes: the latencies of the last answers (seconds from the
    request to its last answer) and the last env step times (seconds between ``observe``
    calls). Answer times are written by the futures' callbacks (one float each); everything
    else happens on the tracker's thread."""

    def __init__(self, clock: Callable[[], float], latencies: int = 32, steps: int = 64) -> None:
        self.clock = clock
        self.latencies: collections.deque[float] = collections.deque(maxlen=latencies)
        self.steps: collections.deque[float] = collections.deque(maxlen=steps)
        self._cache: tuple[int, float | None] = (-1, None)
        self._version = 0

    def record_step(self, seconds: float) -> None:
        self.steps.append(seconds)
        self._version += 1

    def track(self, p: _Pending) -> None:
        p.sent_at = self.clock()
        for future in (p.critic, p.done):
            if future is not None:
                future.add_done_callback(lambda _f: p.answered_at.append(self.clock()))

    def answered(self, p: _Pending) -> None:
        """Record the latency of ``p`` (applied now; its callbacks may not have run yet)."""
        if not p.sent_at:
            return
        expected = 1 + (p.done is not None)
        at = max(p.answered_at) if len(p.answered_at) >= expected else self.clock()
        self.latencies.append(max(0.0, at - p.sent_at))
        self._version += 1

    def latency_steps(self) -> float | None:
        if self._cache[0] == self._version:
            return self._cache[1]
        value = None
        if self.latencies and self.steps:
            lat = sorted(self.latencies)
            p95 = lat[max(0, math.ceil(0.95 * len(lat)) - 1)]
            step = sorted(self.steps)[len(self.steps) // 2]
            value = p95 / max(step, 1e-9)
        self._cache = (self._version, value)
        return value

    def lead_steps(self) -> int | None:
        """Steps before the limit after which a check's answer is expected too late."""
        latency = self.latency_steps()
        return None if latency is None else _ceil(latency) + 1


class _FrameHolder:
    """Materialise a frame (array or callable) at most once."""

    __slots__ = ("_source", "_frame")

    def __init__(self, source: Frame) -> None:
        self._source = source
        self._frame: np.ndarray | None = None

    def get(self) -> np.ndarray:
        if self._frame is None:
            src = self._source
            self._frame = np.asarray(src() if callable(src) else src)
        return self._frame


# ---------------------------------------------------------------------- request modes


_Call = Callable[..., "Future[Any]"]


class _Mode:
    """One request mode: what a check asks, which frames it keeps, how an answer becomes
    progress. Chosen once per tracker from ``TrackerSettings.mode``."""

    def __init__(self, settings: TrackerSettings) -> None:
        self.settings = settings

    def send(
        self, call: _Call, ep: _Episode, step: int, frame: np.ndarray
    ) -> tuple[int, bool, Future[Any]]:
        """Send the check at ``step`` with ``call(method, *args)``: ``(base step, milestone,
        future)``."""
        raise NotImplementedError

    def keep(self, ep: _Episode, step: int, frame: np.ndarray, milestone: bool) -> None:
        """Keep (a copy of) the frames later checks need."""
        raise NotImplementedError

    def value(self, ep: _Episode, p: _Pending, answer: Any) -> float:
        """Progress after the (successful) answer to ``p``."""
        return accumulate(ep.values[p.base_step], answer, self.settings.negative_rule)

    def commits(self, p: _Pending) -> bool:
        """The check's value is kept as the base of later checks."""
        return True

    @staticmethod
    def _replace_base(ep: _Episode, step: int, frame: np.ndarray) -> None:
        if ep.prev_check_step != 0:
            ep.frames.pop(ep.prev_check_step, None)
        ep.frames[step] = np.array(frame, copy=True)
        ep.prev_check_step = step


class _Pairwise(_Mode):
    """Critic between the last milestone frame and the current one; milestones commit."""

    def send(
        self, call: _Call, ep: _Episode, step: int, frame: np.ndarray
    ) -> tuple[int, bool, Future[Any]]:
        base = ep.milestone_step
        future = call("pairwise_critic", ep.task, ep.frames[base], frame)
        return base, is_milestone(step, ep.milestone_step, self.settings.milestone_every), future

    def keep(self, ep: _Episode, step: int, frame: np.ndarray, milestone: bool) -> None:
        if milestone:
            if ep.milestone_step != 0:
                ep.frames.pop(ep.milestone_step, None)
            ep.frames[step] = np.array(frame, copy=True)
            ep.milestone_step = step

    def commits(self, p: _Pending) -> bool:
        return p.milestone


class _Incremental(_Mode):
    """Critic between the previous check frame and the current one, accumulated."""

    def send(
        self, call: _Call, ep: _Episode, step: int, frame: np.ndarray
    ) -> tuple[int, bool, Future[Any]]:
        base = ep.prev_check_step
        return base, True, call("pairwise_critic", ep.task, ep.frames[base], frame)

    def keep(self, ep: _Episode, step: int, frame: np.ndarray, milestone: bool) -> None:
        self._replace_base(ep, step, frame)


class _Trajectory(_Mode):
    """``/trajectory-critic`` over the check frames (at most ``trajectory_max_frames``)."""

    def send(
        self, call: _Call, ep: _Episode, step: int, frame: np.ndarray
    ) -> tuple[int, bool, Future[Any]]:
        kept = ep.check_frames + [(step, frame)]
        idx = uniform_indices(len(kept), self.settings.trajectory_max_frames)
        future = call("trajectory_values", ep.task, [kept[i][1] for i in idx], skip=1)
        return ep.prev_check_step, False, future

    def keep(self, ep: _Episode, step: int, frame: np.ndarray, milestone: bool) -> None:
        self._replace_base(ep, step, frame)
        ep.check_frames.append((step, ep.frames[step]))
        limit = self.settings.trajectory_max_frames
        if len(ep.check_frames) > 4 * limit:
            idx = uniform_indices(len(ep.check_frames), 2 * limit)
            ep.check_frames = [ep.check_frames[i] for i in idx]

    def value(self, ep: _Episode, p: _Pending, answer: Any) -> float:
        if answer is not None and len(answer.value_list) > 0:
            return clamp_progress(answer.value_list[-1])
        return ep.progress


_MODES: dict[str, type[_Mode]] = {
    "pairwise": _Pairwise,
    "incremental": _Incremental,
    "trajectory": _Trajectory,
}
