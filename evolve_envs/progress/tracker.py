"""ProgressTracker: the per-episode progress state machine, independent of Gymnasium.

One tracker follows one episode at a time. It owns every piece of the EVOLVE-VLA progress logic —
the check schedule, milestones, the three request modes, sync/async calls, done decisions, the
reward modes and the end-of-episode settlement — so that the Gymnasium wrapper
(:class:`evolve_envs.wrappers.progress_reward.ProgressReward`) and trainer integrations that step
many envs at once (one tracker per sub-env) share one implementation.

This module holds the lifecycle (reset, observe, finish) and sends the checks; each other job
has a module of its own, so each can be read and tested alone:
:mod:`~evolve_envs.progress.check_schedule` (when checks are sent and waited for),
:mod:`~evolve_envs.progress.request_modes` (what a check asks, how its answer becomes progress),
:mod:`~evolve_envs.progress.settlement` (applying answers: progress, done, model reward),
:mod:`~evolve_envs.progress.tracker_info` (the info keys and the summary), and
:mod:`~evolve_envs.progress.episode_state` (the records they share).

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
  value. Works with progress-only backends (a plugin without a pairwise critic).

Calls: ``"sync"`` — the check at ``t`` is answered before ``observe(t)`` returns, so it decides
step ``t``. ``"async"`` — the request is sent at ``t`` and ``observe`` returns at once; the answer
is applied (reward, progress, termination) at the first later step where it is back, and at the
latest at step ``t + max_lag_steps``, where the tracker waits for it. Answers are applied in the
order they were sent. When the episode ends (env termination/truncation, or progress-done), every
outstanding request is waited for and applied, so the episode's reward sum is exact in both modes.

Async timing (``max_lag_steps="auto"``, ``last_check="before_limit"``): the tracker measures the
answer latency in env steps and waits only for answers late for this service, and moves the
grid's last check so its answer is back before a known time limit (the rules:
docs/PROGRESS.md, "Hiding the latency (async)"). Either way every answer sent is applied (and
waited for at the end if it is not back), so the reward sum stays exact. The summary counts the
answers waited for mid-episode (``lag_waits``) and at the end (``end_waits``).

``"deferred"`` — the env never waits: checks are sent on the ``sync`` grid, ``observe`` returns a
model reward of 0 and the episode is handed on, settled, once its last answer is in:
:meth:`ProgressTracker.settled` returns
:class:`~evolve_envs.progress.settled_episode.SettledEpisode` records whose per-step rewards,
progress and end are ``sync``'s for the same actions (a model done ends the episode at its
check's step; the steps played after it are cut). :mod:`evolve_envs.progress.deferred` has the
contract and its bounds (``max_unsettled_episodes``, ``answer_timeout_s``).

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
    >>> from evolve_envs.reward.service.hosting.embedded import EmbeddedService
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

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np

from evolve_envs.progress.check_schedule import AnswerTiming, answer_deadline, check_now
from evolve_envs.progress.deferred import DeferredSettlement, EpisodeLedger
from evolve_envs.progress.done_rules import TerminationAudit
from evolve_envs.progress.episode_state import EpisodeState, Frame, FrameHolder, PendingCheck
from evolve_envs.progress.request_modes import REQUEST_MODES, RequestMode
from evolve_envs.progress.settings import TrackerSettings, check_capabilities
from evolve_envs.progress.settled_episode import SettledEpisode
from evolve_envs.progress.settlement import AnswerSettlement
from evolve_envs.progress.tracker_info import close_episode, step_info
from evolve_envs.progress.tracker_step import ProgressService, TrackerStep
from evolve_envs.reward.clients.errors import RewardServiceError

__all__ = ["ProgressService", "ProgressTracker", "TrackerStep"]

logger = logging.getLogger(__name__)


class ProgressTracker:
    """Per-episode progress state machine (see the module docstring for the full contract).

    Args:
        client: a progress client (:class:`ProgressService`), e.g.
            ``evolve_envs.reward.clients.progress_client.ProgressClient``.
        settings: :class:`TrackerSettings` (or a mapping of them).
        capabilities: the service's ``/capabilities`` answer; when given, the settings are
            checked against it (:func:`~evolve_envs.progress.settings.check_capabilities`).
            Ask the service once and share it.
        audit: the :class:`~evolve_envs.progress.done_rules.TerminationAudit` that counts this
            tracker's episodes (share one between the trackers of a vectorised env); default a new
            one.
        time_limit: the episodes' time limit in steps, or a zero-argument callable read at
            every :meth:`reset` (e.g. ``lambda: episode_limit(env)``, with
            :func:`~evolve_envs.progress.check_schedule.episode_limit`); used by
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
        self._mode: RequestMode = REQUEST_MODES[settings.mode](settings)
        self._ep = EpisodeState(finished=True)
        self.episodes = 0
        self.audit = audit if audit is not None else TerminationAudit()
        self._judge = settings.rule.judge()
        self.time_limit = time_limit
        self._timing = AnswerTiming(clock)
        self._answers = AnswerSettlement(settings, self._mode, self._judge, self._timing)
        self._deferred = DeferredSettlement(
            settings,
            self._mode,
            self._timing,
            self.audit,
            strict=bool(getattr(client, "fail_on_request_error", False)),
            clock=clock,
        )
        self._ledger: EpisodeLedger | None = None  # the open episode's, in deferred mode

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

    def step_info(self, checked: bool = False, fallback: bool = False) -> dict[str, Any]:
        """The per-step ``info`` keys for the episode's current state (after ``reset``: zeros);
        see :func:`evolve_envs.progress.tracker_info.step_info`."""
        return step_info(self._ep, checked, fallback)

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
        if self._ledger is not None and not self._ledger.ended:
            self._deferred.abandon(self._ledger)
        self._ledger = None
        if self.settings.calls == "deferred":
            self._deferred.make_room()  # waits only at max_unsettled_episodes
        ep = EpisodeState(task=task, first_frame=first)
        ep.frames[0] = first
        ep.check_frames.append((0, first))
        ep.limit = time_limit if time_limit is not None else self._read_limit()
        self._ep = ep
        self._judge.reset()
        self.episodes += 1
        if self.settings.calls == "deferred":
            self._ledger = self._deferred.start(self.episodes, ep)

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
        if self._ledger is not None:
            return self._observe_deferred(
                self._ledger, int(step), frame, env_terminated, env_truncated, env_success
            )
        timed = s.calls == "async"
        if timed and ep.left_at is not None and step == ep.step + 1:
            self._timing.record_step(self._timing.clock() - ep.left_at)
        ep.step = int(step)
        if env_success is not None:
            ep.env_success = bool(env_success)
        holder = FrameHolder(frame)
        reward = 0.0
        fallback_now = False
        applied = 0

        if check_now(s, ep, self._timing, step):
            self._send(step, holder)
        r, n, fb = self._answers.apply_due(ep, step)
        reward, applied, fallback_now = reward + r, applied + n, fallback_now or fb

        terminate = ep.done and s.terminate_on_done
        over = bool(env_terminated or env_truncated or terminate)
        if over:
            if s.check_at_episode_end and ep.last_sent_step != step:
                self._send(step, holder)
            r, n, fb = self._settle()
            reward, applied, fallback_now = reward + r, applied + n, fallback_now or fb
            terminate = ep.done and s.terminate_on_done

        info = step_info(ep, applied > 0, fallback_now)
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
        if self._ledger is not None:  # deferred: detached; settled() hands it on
            self._deferred.end(self._ledger, env_terminated=False, env_truncated=False)
            return 0.0
        reward, _, _ = self._settle()
        return reward

    # ------------------------------------------------------------------ deferred settlement
    def _observe_deferred(
        self,
        ledger: EpisodeLedger,
        step: int,
        frame: Frame,
        env_terminated: bool,
        env_truncated: bool,
        env_success: bool | None,
    ) -> TrackerStep:
        """``observe`` under ``calls: deferred``: send on the sync grid, apply what is back,
        never wait; a model done already back ends the episode now."""
        s, ep = self.settings, self._ep
        ledger.played(step, env_success)
        holder = FrameHolder(frame)
        if ledger.cut_at is None and check_now(s, ep, self._timing, step):
            self._send(step, holder)
        applied = self._deferred.pump_open(ledger, wait=False)
        terminate = ledger.cut_at is not None
        over = bool(env_terminated or env_truncated or terminate)
        if over:
            if s.check_at_episode_end and not terminate and ep.last_sent_step != step:
                self._send(step, holder)
            self._deferred.end(ledger, env_terminated=env_terminated, env_truncated=env_truncated)
        info = step_info(ep, applied > 0, False)
        return TrackerStep(0.0, ep.progress, terminate, over, applied > 0, info)

    def settled(self, wait: bool = False) -> list[SettledEpisode]:
        """``calls: deferred``: the episodes settled since the last call, in the order they
        were played, each handed on once. An episode is settled when its last answer is in;
        ``wait=True`` waits for the answers of every episode that has ended (not the open one).

        Each :class:`~evolve_envs.progress.settled_episode.SettledEpisode` holds the model reward
        and the progress of each step (``sync``'s for the same actions), its end and the steps
        cut after a model done. The summary (``.summary``) is the one ``sync`` writes at the
        episode's last step, plus ``steps_played`` and ``cut_steps``. Returns ``[]`` in the other
        modes."""
        return self._deferred.settled(wait)

    def running_episode(self, wait: bool = True) -> SettledEpisode | None:
        """``calls: deferred``: the open episode's steps so far (``final=False``), with
        ``wait`` after waiting for every answer sent so far, so that each of these steps'
        rewards is final (a sparse or binary level is paid later, at the episode's last step).
        A model done among them shows as ``terminated`` at its step; the next ``observe`` ends
        the episode. ``None`` when no episode is open (or not in deferred mode)."""
        ledger = self._ledger
        if ledger is None or ledger.ended:
            return None
        self._deferred.pump_open(ledger, wait=wait)
        return ledger.record(final=False)

    def deferred_stats(self) -> dict[str, int | float]:
        """``calls: deferred``: unsettled episodes, frame bytes held, saturation waits, answer
        timeouts, cut steps (:meth:`evolve_envs.progress.deferred.DeferredSettlement.stats`)."""
        open_ledger = self._ledger if self._ledger is not None and not self._ledger.ended else None
        return self._deferred.stats(open_ledger)

    # ------------------------------------------------------------------ schedule
    def _read_limit(self) -> int | None:
        limit = self.time_limit() if callable(self.time_limit) else self.time_limit
        return int(limit) if limit is not None else None

    # ------------------------------------------------------------------ requests
    def _send(self, step: int, holder: FrameHolder) -> None:
        ep, s = self._ep, self.settings
        frame = holder.get()
        sent = 2 if s.needs_pairwise else min(len(ep.check_frames) + 1, s.trajectory_max_frames)
        base, milestone, future = self._mode.send(self._call, ep, step, frame)
        done_future = None
        if s.needs_done:
            assert ep.first_frame is not None
            prev = ep.frames.get(base, ep.first_frame)
            done_future = self._call("done", ep.task, ep.first_frame, prev, frame)
        ep.calls += 1 + (done_future is not None)
        deadline = answer_deadline(s, self._timing, step)
        pending = PendingCheck(step, base, milestone, future, done_future, deadline)
        if s.calls != "sync":
            self._timing.track(pending)
        if s.calls == "deferred":  # the frames its requests carry (reported)
            pending.frame_bytes = (sent + 3 * (done_future is not None)) * frame.nbytes
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

    def _settle(self) -> tuple[float, int, bool]:
        ep = self._ep
        reward, applied, fallback = self._answers.settle(ep)
        ep.finished = True
        ep.summary = close_episode(ep, self.settings, self.audit)
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
