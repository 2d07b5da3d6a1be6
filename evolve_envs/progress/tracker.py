"""ProgressTracker: the per-episode progress state machine, independent of Gymnasium.

Example (against a local mock service whose *intensity* rule reads a uniformly grey frame of
level ``g`` as progress ``round(100 * g / 255)``):

    >>> import numpy as np
    >>> from evolve_envs.reward.clients.progress_client import ProgressClient
    >>> from evolve_envs.reward.service.hosting.embedded import EmbeddedService
    >>> svc = EmbeddedService("mock", {"rule": "intensity"}).start()
    >>> client = ProgressClient(svc.url)
    >>> settings = TrackerConfig(start_step=2, call_every=2, milestone_every=2)
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

import numpy as np

from evolve_envs.progress.answers import CheckAnswers
from evolve_envs.progress.check_schedule import AnswerTiming, answer_deadline, check_now
from evolve_envs.progress.deferred import DeferredSettlement, EpisodeLedger
from evolve_envs.progress.done_rules import TerminationAudit
from evolve_envs.progress.episode_state import (
    Answer,
    EpisodeState,
    Frame,
    FrameHolder,
    PendingCheck,
)
from evolve_envs.progress.request_modes import REQUEST_MODES, RequestMode
from evolve_envs.progress.settled_episode import SettledEpisode
from evolve_envs.progress.tracker_config import TrackerConfig, check_capabilities
from evolve_envs.progress.tracker_info import close_episode, step_info
from evolve_envs.progress.tracker_step import ProgressService, TrackerStep
from evolve_envs.reward.clients.errors import RewardServiceError
from evolve_envs.reward.protocol.wire import Capabilities

__all__ = ["ProgressService", "ProgressTracker", "TrackerStep"]

logger = logging.getLogger(__name__)


class ProgressTracker:
    """Per-episode progress state machine (docs/PROGRESS.md)."""

    def __init__(
        self,
        client: ProgressService,
        settings: TrackerConfig | Mapping[str, object] | None = None,
        *,
        capabilities: Capabilities | Mapping[str, object] | None = None,
        audit: TerminationAudit | None = None,
        time_limit: int | Callable[[], int | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if settings is None:
            settings = TrackerConfig()
        elif isinstance(settings, Mapping):
            settings = TrackerConfig.from_mapping(settings)
        self.settings: TrackerConfig = settings
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
        self._answers = CheckAnswers(settings, self._mode, self._judge, self._timing)
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

    def totals(self) -> dict[str, object]:
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
    def summary(self) -> dict[str, object] | None:
        """The last settled episode's summary (``None`` while an episode runs)."""
        return self._ep.summary

    def step_info(self, checked: bool = False, fallback: bool = False) -> dict[str, object]:
        """The per-step ``info`` keys for the episode's current state (after ``reset``: zeros);
        see :func:`evolve_envs.progress.tracker_info.step_info`."""
        return step_info(self._ep, checked, fallback)

    def latency_steps(self) -> float | None:
        """The answer latency in env steps the async schedule works with (95th percentile of
        the recent latencies over the median step time); ``None`` before both are measured."""
        return self._timing.latency_steps()

    def reset(self, task: str, first_frame: np.ndarray, *, time_limit: int | None = None) -> None:
        """Start a new episode for ``task`` whose first frame (step 0) is ``first_frame``."""
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
        """Account for env step ``step`` whose resulting frame is ``frame``."""
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
            r, n, fb = self._close_episode()
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
        """Settle the episode now (caller ends it, e.g. a chunked rollout stops early)."""
        if self._ep.finished:
            return 0.0
        if self._ledger is not None:  # deferred: detached; settled() hands it on
            self._deferred.end(self._ledger, env_terminated=False, env_truncated=False)
            return 0.0
        reward, _, _ = self._close_episode()
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
        ``wait=True`` waits for the answers of every episode that has ended (not the open one)."""
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

    def _call(self, method: str, *args: object, **kwargs: object) -> Answer:
        """Ask the client: in sync mode directly on this thread (the answer is needed before
        ``observe`` returns anyway), in async mode through its ``submit_*`` twin. Either way
        the answer is a future, so both modes apply answers the same way."""
        direct = getattr(self.client, method, None) if self.settings.calls == "sync" else None
        if direct is None:
            return getattr(self.client, f"submit_{method}")(*args, **kwargs)
        future: Answer = Future()
        try:
            future.set_result(direct(*args, **kwargs))
        except RewardServiceError as exc:  # fail-fast mode: raised where the answer is applied
            future.set_exception(exc)
        return future

    def _close_episode(self) -> tuple[float, int, bool]:
        ep = self._ep
        reward, applied, fallback = self._answers.close(ep)
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
