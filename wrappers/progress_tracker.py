"""ProgressTracker: the per-episode progress state machine, independent of Gymnasium.

One tracker follows one episode at a time. It owns every piece of the EVOLVE-VLA progress logic —
the check schedule, milestones, the three request modes, sync/async calls, done decisions, the
reward modes and the end-of-episode settlement — so that the Gymnasium wrapper
(:class:`wrappers.progress_reward.ProgressReward`) and trainer integrations that step many envs
at once (one tracker per sub-env) share one implementation.

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
  At a milestone check (see :func:`~wrappers.progress_math.is_milestone`) ``v_t`` is committed:
  ``o_t`` becomes the milestone frame and ``v_t`` its value. Needs the ``pairwise`` capability.
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

Done: ``done_by="threshold"`` — ``progress/100 {>=|>} done_threshold`` (``done_comparison``;
the fraction is rounded to 9 decimals first, so accumulation noise cannot flip it);
``"backend"`` — the service's ``/done`` answer (needs the ``done`` capability); ``"either"`` /
``"both"`` — OR / AND of the two; or any :class:`~wrappers.done_rules.DoneRule` (k of the last
n checks above the threshold, the backend, and any/all combinations of rules). With
``terminate_on_done`` the decision ends the episode. Every settled episode is counted in
the tracker's :class:`~wrappers.done_rules.TerminationAudit` (shareable between trackers): the
summary reports whether the model judged the episode done, whether the env had succeeded at that
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
time as its value. With a client in fail-fast mode the :class:`~reward_clients.errors.
RewardServiceError` propagates out of :meth:`observe`; the failed check is then accounted
exactly like a fallback (progress held, error counted), so a caller that catches the error can
keep stepping the episode and later checks work as soon as the service is back. When an episode
ends with more than ``failure_warn_fraction`` of its answers failed, a warning says so (with the
counts) on this module's logger.

Example::

    from reward_clients.progress_client import ProgressClient
    from wrappers.progress_tracker import ProgressTracker, TrackerSettings

    client = ProgressClient("http://127.0.0.1:8111")
    settings = TrackerSettings(start_step=8, call_every=4, milestone_every=8)
    tracker = ProgressTracker(client, settings)
    tracker.reset("open the drawer", first_frame)
    out = tracker.observe(8, frame_8)
    out.reward, out.progress, out.info["progress_calls"]
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol

import numpy as np

from wrappers.done_rules import DONE_BY, DoneRule, TerminationAudit
from wrappers.frame_cache import uniform_indices
from wrappers.progress_math import (
    COMPARISONS,
    NEGATIVE_RULES,
    Comparison,
    NegativeRule,
    accumulate,
    clamp_progress,
    is_check_step,
    is_milestone,
    reached,
)

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
    "ConfigurationError",
]

logger = logging.getLogger(__name__)

ProgressMode = Literal["pairwise", "incremental", "trajectory"]
RewardMode = Literal["dense", "sparse", "binary"]
CallMode = Literal["sync", "async"]
DoneBy = Literal["threshold", "backend", "either", "both"]

Frame = np.ndarray | Callable[[], np.ndarray]


class ConfigurationError(ValueError):
    """A progress configuration that cannot work (bad value, or a backend that lacks a route)."""


@dataclass(frozen=True)
class TrackerSettings:
    """Everything a :class:`ProgressTracker` needs to know; validated on construction.

    Defaults are EVOLVE-VLA's (docs/PROGRESS.md: start 64, every 16, milestones every 64, done at
    progress >= 95).

    Example::

        TrackerSettings(mode="trajectory", calls="async", max_lag_steps=8, reward_mode="sparse")
    """

    mode: ProgressMode = "pairwise"
    start_step: int = 64
    call_every: int = 16
    milestone_every: int = 64
    negative_rule: NegativeRule = "vlac"
    done_threshold: float = 0.95
    done_comparison: Comparison = ">="
    done_by: DoneBy | DoneRule = "threshold"
    terminate_on_done: bool = True
    reward_mode: RewardMode = "dense"
    success_threshold: float = 0.5
    reward_coef: float = 1.0
    use_rel_reward: bool = False
    calls: CallMode = "sync"
    max_lag_steps: int = 16
    check_at_episode_end: bool = False
    trajectory_max_frames: int = 32
    failure_warn_fraction: float = 0.1

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ConfigurationError:
            return ConfigurationError(f"{name}: {why}, got {getattr(self, name)!r}")

        choices = {
            "mode": ("pairwise", "incremental", "trajectory"),
            "negative_rule": NEGATIVE_RULES,
            "done_comparison": COMPARISONS,
            "reward_mode": ("dense", "sparse", "binary"),
            "calls": ("sync", "async"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise bad(name, f"expected one of {allowed}")
        if self.start_step < 0:
            raise bad("start_step", "must be >= 0")
        if self.call_every < 1:
            raise bad("call_every", "must be >= 1")
        if self.max_lag_steps < 0:
            raise bad("max_lag_steps", "must be >= 0")
        if self.trajectory_max_frames < 2:
            raise bad("trajectory_max_frames", "must be >= 2")
        if not 0.0 <= self.done_threshold <= 1.0:
            raise bad("done_threshold", "must be in [0, 1] (a fraction of full progress)")
        if not 0.0 <= self.success_threshold <= 1.0:
            raise bad("success_threshold", "must be in [0, 1]")
        if not 0.0 <= self.failure_warn_fraction <= 1.0:
            raise bad("failure_warn_fraction", "must be in [0, 1]")
        if isinstance(self.done_by, str):  # the four names stay strings
            if self.done_by not in DONE_BY:
                raise bad("done_by", f"expected one of {DONE_BY} or a done rule mapping")
        else:
            try:
                object.__setattr__(self, "done_by", DoneRule.parse(self.done_by))
            except ValueError as exc:
                raise bad("done_by", f"not a done rule ({exc})") from None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> TrackerSettings:
        """Build settings from a mapping, ignoring keys that are not settings."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    @property
    def needs_pairwise(self) -> bool:
        return self.mode in ("pairwise", "incremental")

    @property
    def rule(self) -> DoneRule:
        """The done rule ``done_by`` describes (the four names mapped to their rules)."""
        if isinstance(self.done_by, DoneRule):
            return self.done_by
        return DoneRule.from_done_by(self.done_by)

    @property
    def needs_done(self) -> bool:
        return self.rule.needs_backend


def check_capabilities(settings: TrackerSettings, capabilities: Any) -> None:
    """Raise :class:`ConfigurationError` if the backend cannot serve ``settings``.

    ``capabilities`` is the service's ``/capabilities`` answer (an object or mapping with
    ``backend``, ``progress``, ``pairwise``, ``done``).
    """

    def cap(name: str) -> bool:
        if isinstance(capabilities, Mapping):
            return bool(capabilities.get(name, False))
        return bool(getattr(capabilities, name, False))

    backend = (
        capabilities.get("backend") if isinstance(capabilities, Mapping) else None
    ) or getattr(capabilities, "backend", "?")
    if settings.needs_pairwise and not cap("pairwise"):
        raise ConfigurationError(
            f"reward_model.mode={settings.mode!r} needs the pairwise critic, but backend "
            f"{backend!r} offers progress only; use mode='trajectory'"
        )
    if settings.needs_done and not cap("done"):
        rule = settings.done_by if isinstance(settings.done_by, str) else settings.rule.describe()
        raise ConfigurationError(
            f"reward_model.done_by={rule!r} needs the backend's /done, but backend "
            f"{backend!r} does not offer it; use done_by='threshold'"
        )
    if settings.mode == "trajectory" and not cap("progress"):
        raise ConfigurationError(f"backend {backend!r} does not offer /trajectory-critic")


class ProgressService(Protocol):
    """What the tracker needs from a progress client (``reward_clients.ProgressClient`` fits).

    Each method returns a ``Future`` of a result with ``value``, ``ok``, ``fallback``,
    ``latency_s`` and ``error`` (a ``reward_clients.results.CallResult``).
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
            ``reward_clients.progress_client.ProgressClient``.
        settings: :class:`TrackerSettings` (or a mapping of them).
        capabilities: the service's ``/capabilities`` answer; when given, the settings are
            checked against it (:func:`check_capabilities`). Ask the service once and share it.
        audit: the :class:`~wrappers.done_rules.TerminationAudit` that counts this tracker's
            episodes (share one between the trackers of a vectorised env); default a new one.

    Example::

        tracker = ProgressTracker(client, TrackerSettings(start_step=4, call_every=4))
        tracker.reset("put the bowl on the plate", frame0)
        for t, frame in enumerate(frames, start=1):
            out = tracker.observe(t, frame, env_truncated=(t == len(frames)))
        out.summary["progress"]
    """

    def __init__(
        self,
        client: ProgressService,
        settings: TrackerSettings | Mapping[str, Any] | None = None,
        *,
        capabilities: Any = None,
        audit: TerminationAudit | None = None,
    ) -> None:
        if settings is None:
            settings = TrackerSettings()
        elif isinstance(settings, Mapping):
            settings = TrackerSettings.from_mapping(settings)
        self.settings: TrackerSettings = settings
        if capabilities is not None:
            check_capabilities(settings, capabilities)
        self.client = client
        self._ep = _Episode(finished=True)
        self.episodes = 0
        self.audit = audit if audit is not None else TerminationAudit()
        self._judge = settings.rule.judge()

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

    @property
    def summary(self) -> dict[str, Any] | None:
        """The last settled episode's summary (``None`` while an episode runs)."""
        return self._ep.summary

    def reset(self, task: str, first_frame: np.ndarray) -> None:
        """Start a new episode for ``task`` whose first frame (step 0) is ``first_frame``.

        An unfinished previous episode is abandoned: its outstanding requests are not waited for.
        """
        if not isinstance(task, str) or not task.strip():
            raise ValueError(f"task must be a non-empty string, got {task!r}")
        first = np.array(first_frame, copy=True)
        ep = _Episode(task=task, first_frame=first)
        ep.frames[0] = first
        ep.check_frames.append((0, first))
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
        ep.step = int(step)
        if env_success is not None:
            ep.env_success = bool(env_success)
        s = self.settings
        holder = _FrameHolder(frame)
        reward = 0.0
        fallback_now = False
        applied = 0

        if is_check_step(step, start_step=s.start_step, call_every=s.call_every):
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

    # ------------------------------------------------------------------ requests
    def _send(self, step: int, holder: _FrameHolder) -> None:
        ep, s = self._ep, self.settings
        frame = holder.get()
        milestone = False
        if s.mode == "pairwise":
            base = ep.milestone_step
            future = self.client.submit_pairwise_critic(ep.task, ep.frames[base], frame)
            milestone = is_milestone(step, ep.milestone_step, s.milestone_every)
        elif s.mode == "incremental":
            base = ep.prev_check_step
            future = self.client.submit_pairwise_critic(ep.task, ep.frames[base], frame)
            milestone = True
        else:
            base = ep.prev_check_step
            kept = ep.check_frames + [(step, frame)]
            chosen = [kept[i][1] for i in uniform_indices(len(kept), s.trajectory_max_frames)]
            future = self.client.submit_trajectory_values(ep.task, chosen, skip=1)
        done_future = None
        if s.needs_done:
            assert ep.first_frame is not None
            prev = ep.frames.get(base, ep.first_frame)
            done_future = self.client.submit_done(ep.task, ep.first_frame, prev, frame)
        ep.calls += 1 + (done_future is not None)
        ep.pending.append(_Pending(step, base, milestone, future, done_future))
        ep.last_sent_step = step

        kept_frame = np.array(frame, copy=True)
        if s.mode == "pairwise":
            if milestone:
                if ep.milestone_step != 0:
                    ep.frames.pop(ep.milestone_step, None)
                ep.frames[step] = kept_frame
                ep.milestone_step = step
        else:
            if ep.prev_check_step != 0:
                ep.frames.pop(ep.prev_check_step, None)
            ep.frames[step] = kept_frame
            ep.prev_check_step = step
            if s.mode == "trajectory":
                ep.check_frames.append((step, kept_frame))
                if len(ep.check_frames) > 4 * s.trajectory_max_frames:
                    idx = uniform_indices(len(ep.check_frames), 2 * s.trajectory_max_frames)
                    ep.check_frames = [ep.check_frames[i] for i in idx]

    def _apply_due(self, step: int) -> tuple[float, int, bool]:
        """Apply answers in send order: those back, and those that reached the max lag."""
        ep, s = self._ep, self.settings
        reward, applied, fallback = 0.0, 0, False
        while ep.pending:
            head = ep.pending[0]
            due = s.calls == "sync" or step - head.step >= s.max_lag_steps
            ready = head.critic.done() and (head.done is None or head.done.done())
            if not (due or ready):
                break
            r, fb = self._apply(ep.pending.popleft())
            reward, applied, fallback = reward + r, applied + 1, fallback or fb
        return reward, applied, fallback

    def _apply(self, p: _Pending) -> tuple[float, bool]:
        ep, s = self._ep, self.settings
        try:
            result = p.critic.result()  # raises RewardServiceError in fail-fast mode
            done_result = p.done.result() if p.done is not None else None
        except BaseException as exc:
            self._hold_failed(p, exc)
            raise
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

        value = ep.progress  # a failed answer holds progress
        if result.ok:
            if s.mode == "trajectory":
                if result.value is not None and len(result.value.value_list) > 0:
                    value = clamp_progress(result.value.value_list[-1])
            else:
                value = accumulate(ep.values[p.base_step], result.value, s.negative_rule)
        if p.milestone or s.mode != "pairwise":
            ep.values[p.step] = value
            for old in [k for k in ep.values if 0 < k < p.base_step]:
                del ep.values[old]

        reward = self._reward_for(value)
        ep.progress = value
        ep.max_progress = max(ep.max_progress, value)

        above = (
            reached(_fraction(value), s.done_threshold, s.done_comparison) if result.ok else None
        )
        by_backend = (
            bool(done_result.value.done)
            if done_result is not None and done_result.ok and done_result.value is not None
            else None
        )
        decision = self._judge.update(above=above, backend=by_backend)
        if decision and not ep.done:
            ep.done = True
            ep.done_step = ep.step
            ep.done_env_success = ep.env_success
        return reward, fallback

    def _hold_failed(self, p: _Pending, exc: BaseException) -> None:
        """Account a check whose request raised (fail-fast mode) like a failed answer: the
        progress is held and becomes the value of the check's frame, so later checks that use
        that frame as their base find a value."""
        ep, s = self._ep, self.settings
        ep.answers += 1
        ep.errors += 1
        ep.last_error = str(exc)
        if p.milestone or s.mode != "pairwise":
            ep.values[p.step] = ep.progress
            for old in [k for k in ep.values if 0 < k < p.base_step]:
                del ep.values[old]

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
