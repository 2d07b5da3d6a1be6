"""Deferred settlement (``calls: deferred``): the env never waits, each answer settles its step.

The contract: docs/PROGRESS.md, "Deferred settlement". An episode ends with its check of step 1
unanswered; it is handed on once the answer is back, its reward paid at step 1:

>>> from evolve_envs.progress.request_modes import REQUEST_MODES
>>> s = TrackerConfig(calls="deferred")
>>> clock = lambda: 0.0  # the check was sent at 0.0 and time stands still: no answer is late
>>> book = DeferredSettlement(s, REQUEST_MODES[s.mode](s), AnswerTiming(clock),
...                           TerminationAudit(), strict=False, clock=clock)
>>> ledger = book.start(1, EpisodeState(task="open the drawer"))
>>> ledger.played(1, env_success=False); ledger.played(2, env_success=False)
>>> answer: Answer = Future()
>>> ledger.ep.pending.append(PendingCheck(step=1, base_step=0, milestone=True, critic=answer))
>>> book.end(ledger, env_terminated=False, env_truncated=True); book.settled()
[]
>>> answer.set_result(CallResult(40.0, ok=True, fallback=False, latency_s=0.1, endpoint=None))
>>> [(ep.length, ep.rewards.tolist(), ep.truncated) for ep in book.settled()]
[(2, [0.4, 0.0], True)]
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future
from concurrent.futures import wait as wait_futures

import numpy as np

from evolve_envs.progress.answers import CheckAnswers
from evolve_envs.progress.check_schedule import AnswerTiming
from evolve_envs.progress.done_rules import TerminationAudit
from evolve_envs.progress.episode_state import Answer, EpisodeState, PendingCheck
from evolve_envs.progress.request_modes import RequestMode
from evolve_envs.progress.settled_episode import SettledEpisode
from evolve_envs.progress.tracker_config import TrackerConfig
from evolve_envs.progress.tracker_info import close_episode
from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.clients.results import CallResult

__all__ = ["DeferredSettlement", "EpisodeLedger"]

logger = logging.getLogger(__name__)

#: settled episodes held uncollected at which a warning says so (once per tracker)
UNCOLLECTED_WARNING = 1024


class EpisodeLedger:
    """One episode under deferred settlement: its state, its own answer settlement (and done
    judge), the model reward and the env's success flag of every step played so far."""

    def __init__(self, index: int, ep: EpisodeState, answers: CheckAnswers) -> None:
        self.index = index
        self.ep = ep
        self.answers = answers
        self.rewards: list[float] = []  # model reward of step t at [t - 1]
        self.success: list[bool | None] = []  # env success flag after step t at [t - 1]
        self.marks: list[tuple[int, float]] = []  # (check step, progress after its answer)
        self.cut_at: int | None = None  # the step of the check that judged the task done
        self.cut_checks = 0
        self.ended = False
        self.env_terminated = False
        self.env_truncated = False
        self.timeouts = 0

    def played(self, step: int, env_success: bool | None) -> None:
        """Account env step ``step`` (1, 2, ... without gaps)."""
        if env_success is not None:
            self.ep.env_success = bool(env_success)
        self.ep.step = step
        self.rewards.append(0.0)
        self.success.append(self.ep.env_success)

    @property
    def length(self) -> int:
        """Steps that belong to the episode (cut at a model done)."""
        return self.cut_at if self.cut_at is not None else self.ep.step

    @property
    def complete(self) -> bool:
        return self.ended and not self.ep.pending

    def apply(self, p: PendingCheck) -> bool:
        """Apply the answer to ``p`` at its own step; ``True`` when it was a fallback."""
        ep = self.ep
        was_done = ep.done
        reward, fallback = self.answers.apply(ep, p, at=(p.step, self.success[p.step - 1]))
        self.rewards[p.step - 1] += reward
        self.marks.append((p.step, ep.progress))
        if ep.done and not was_done and self.answers.settings.terminate_on_done:
            self.cut(p.step)
        return fallback

    def cut(self, step: int) -> None:
        """End the episode at ``step`` (a model done): drop the checks sent after it."""
        ep = self.ep
        self.cut_at = step
        for q in ep.pending:
            for future in (q.critic, q.done):
                if future is not None:
                    future.cancel()
            ep.calls -= 1 + (q.done is not None)
            self.cut_checks += 1
        ep.pending.clear()

    def record(self, *, final: bool) -> SettledEpisode:
        """The episode as a :class:`SettledEpisode` (its steps up to now when not ``final``)."""
        n = self.length
        progress = np.zeros(n)
        for step, value in self.marks:
            if step <= n:
                progress[step - 1 :] = value
        rewards = np.asarray(self.rewards[:n], dtype=np.float64)
        played = len(self.rewards)
        cut = self.cut_at is not None
        return SettledEpisode(
            index=self.index,
            task=self.ep.task,
            steps_played=played,
            length=n,
            rewards=rewards,
            model_rewards=rewards.copy(),
            progress=progress,
            terminated=cut or (final and self.env_terminated and n == played),
            truncated=final and self.env_truncated and n == played,
            summary=dict(self.ep.summary or {}) if final else {},
            final=final,
        )


class DeferredSettlement:
    """A tracker's ended deferred episodes, waiting for answers or settled and not yet handed on
    (docs/PROGRESS.md); the tracker keeps the open episode's ledger and passes it in."""

    def __init__(
        self,
        settings: TrackerConfig,
        mode: RequestMode,
        timing: AnswerTiming,
        audit: TerminationAudit,
        *,
        strict: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.mode = mode
        self.timing = timing
        self.audit = audit
        self.strict = strict
        self.clock = clock
        self.unsettled: collections.deque[EpisodeLedger] = collections.deque()
        self.ready: list[SettledEpisode] = []
        self.counts = {
            "episodes_settled": 0,
            "saturation_waits": 0,
            "saturation_wait_s": 0.0,
            "answer_timeouts": 0,
            "cut_steps": 0,
            "cut_checks": 0,
            "abandoned": 0,
            "peak_unsettled_episodes": 0,
            "peak_unsettled_frame_bytes": 0,
        }

    # ------------------------------------------------------------------ lifecycle
    def start(self, index: int, ep: EpisodeState) -> EpisodeLedger:
        """A ledger for a new episode (with a done judge of its own)."""
        s = self.settings
        return EpisodeLedger(index, ep, CheckAnswers(s, self.mode, s.rule.judge(), self.timing))

    def end(self, ledger: EpisodeLedger, *, env_terminated: bool, env_truncated: bool) -> None:
        """The env ended ``ledger``'s episode (or the model did): detach it."""
        ledger.ended = True
        ledger.env_terminated, ledger.env_truncated = bool(env_terminated), bool(env_truncated)
        ledger.ep.finished = True
        ledger.ep.frames.clear()  # no check is sent any more: the bases are not needed
        ledger.ep.check_frames = []
        self.unsettled.append(ledger)
        self._note_peaks()

    def abandon(self, ledger: EpisodeLedger) -> None:
        """A ``reset`` before the episode ended (as ``sync``, it is dropped)."""
        ledger.cut(ledger.ep.step)
        self.counts["abandoned"] += 1

    def make_room(self) -> None:
        """Before a new episode: at ``max_unsettled_episodes`` detached episodes, wait for the
        oldest (the service is saturated; counted)."""
        self.pump(wait=False)
        while len(self.unsettled) >= self.settings.max_unsettled_episodes:
            start = self.clock()
            self._pump_one(self.unsettled[0], wait=True)
            self.counts["saturation_waits"] += 1
            self.counts["saturation_wait_s"] += self.clock() - start
            self.pump(wait=False)

    # ------------------------------------------------------------------ answers
    def pump(self, wait: bool) -> None:
        """Apply the answers that are back (``wait``: every answer) of the detached episodes and
        settle, in order, those whose last answer is in."""
        while self.unsettled:
            head = self.unsettled[0]
            self._pump_one(head, wait)
            if not head.complete:
                return
            self.unsettled.popleft()
            self._hold(self._finalize(head))

    def pump_open(self, ledger: EpisodeLedger, wait: bool) -> int:
        """Apply the open episode's answers that are back (``wait``: all sent so far); returns
        how many were applied."""
        before = len(ledger.ep.pending)
        self._pump_one(ledger, wait)
        self._note_peaks(ledger)
        return before - len(ledger.ep.pending)

    def settled(self, wait: bool = False) -> list[SettledEpisode]:
        """The episodes settled since the last call, oldest first (``wait``: every detached
        episode, waiting for its answers)."""
        self.pump(wait)
        out, self.ready = self.ready, []
        return out

    def _hold(self, episode: SettledEpisode) -> None:
        """Keep a settled episode until it is asked for (nothing is dropped); say once when
        they pile up uncollected."""
        self.ready.append(episode)
        if len(self.ready) == UNCOLLECTED_WARNING:
            logger.warning(
                "calls: deferred: %d settled episodes are waiting to be collected; call "
                "settled() (settled_episodes(env), SettledRewards.settle()) to take them",
                len(self.ready),
            )

    def _pump_one(self, ledger: EpisodeLedger, wait: bool) -> None:
        ep = ledger.ep
        while ep.pending and ledger.cut_at is None:
            head = ep.pending[0]
            if not self._answered(ledger, head, wait):
                return
            ep.pending.popleft()
            ledger.apply(head)

    def _answered(self, ledger: EpisodeLedger, p: PendingCheck, wait: bool) -> bool:
        """``p``'s answers are in (waiting for them with ``wait``), or past the deadline, where
        the failure policy answers in their place."""
        if p.ready():
            return True
        futures = [f for f in (p.critic, p.done) if f is not None]
        left = p.sent_at + self.settings.answer_timeout_s - self.clock()
        if left > 0:
            if not wait:
                return False
            wait_futures(futures, timeout=left, return_when=FIRST_EXCEPTION)
            if p.ready():
                return True
        self._expire(ledger, p)
        return True

    def _expire(self, ledger: EpisodeLedger, p: PendingCheck) -> None:
        timeout = self.settings.answer_timeout_s
        cause = f"no answer to the check of step {p.step} within answer_timeout_s={timeout:g}"
        ledger.timeouts += 1
        self.counts["answer_timeouts"] += 1
        logger.warning(
            "reward model: %s (episode %d of task %r); %s",
            cause,
            ledger.index,
            ledger.ep.task,
            "raising (fail_on_request_error)" if self.strict else "progress held (fallback)",
        )
        p.critic = self._stand_in(p.critic, cause, timeout)
        if p.done is not None:
            p.done = self._stand_in(p.done, cause, timeout)

    def _stand_in(self, future: Answer, cause: str, timeout: float) -> Answer:
        """``future`` if it is answered; else cancelled, and an answer that says it timed out
        (raising in fail-fast mode, a fallback otherwise) in its place."""
        if future.done():
            return future
        future.cancel()
        stand_in: Answer = Future()
        if self.strict:
            stand_in.set_exception(RewardServiceError(None, "", cause, kind=ErrorKind.TIMEOUT))
        else:
            stand_in.set_result(
                CallResult(
                    None, ok=False, fallback=True, latency_s=timeout, endpoint=None, error=cause
                )
            )
        return stand_in

    # ------------------------------------------------------------------ settling
    def _finalize(self, ledger: EpisodeLedger) -> SettledEpisode:
        """Pay the level owed at the end, count the episode, write its summary."""
        ep, n = ledger.ep, ledger.length
        ep.step = n
        ep.env_success = ledger.success[n - 1] if n else ep.env_success
        reward, _, _ = ledger.answers.close(ep)  # nothing is pending: the end level only
        if n:
            ledger.rewards[n - 1] += reward
        ep.summary = close_episode(ep, self.settings, self.audit)
        cut = len(ledger.rewards) - n
        ep.summary.update(steps_played=len(ledger.rewards), cut_steps=cut)
        self.counts["episodes_settled"] += 1
        self.counts["cut_steps"] += cut
        self.counts["cut_checks"] += ledger.cut_checks
        return ledger.record(final=True)

    # ------------------------------------------------------------------ reporting
    def frame_bytes(self, open_ledger: EpisodeLedger | None = None) -> int:
        """Bytes of frames held for unanswered checks (the frames of their requests) and kept
        by the open episode."""
        ledgers = [*self.unsettled, *([open_ledger] if open_ledger is not None else [])]
        held = sum(p.frame_bytes for ledger in ledgers for p in ledger.ep.pending)
        if open_ledger is not None:
            held += sum(f.nbytes for f in open_ledger.ep.frames.values())
        return held

    def _note_peaks(self, open_ledger: EpisodeLedger | None = None) -> None:
        c = self.counts
        c["peak_unsettled_episodes"] = max(c["peak_unsettled_episodes"], len(self.unsettled))
        c["peak_unsettled_frame_bytes"] = max(
            c["peak_unsettled_frame_bytes"], self.frame_bytes(open_ledger)
        )

    def stats(self, open_ledger: EpisodeLedger | None = None) -> dict[str, int | float]:
        """Counters: ``unsettled_episodes`` (detached, answers out), ``settled_waiting`` (settled,
        not yet handed on), ``unsettled_frame_bytes``, and the running ``episodes_settled``,
        ``saturation_waits`` / ``saturation_wait_s`` (resets that waited: the service is
        saturated), ``answer_timeouts``, ``cut_steps`` / ``cut_checks`` (played / sent after a
        model done), ``abandoned``, ``peak_unsettled_episodes``, ``peak_unsettled_frame_bytes``."""
        return {
            "unsettled_episodes": len(self.unsettled),
            "settled_waiting": len(self.ready),
            "unsettled_frame_bytes": self.frame_bytes(open_ledger),
            **self.counts,
        }
