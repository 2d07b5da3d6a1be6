"""A tracker's check answers: applied to its episode as they are due, and all of them when the
episode closes (with the level a sparse reward pays at the end)."""

from __future__ import annotations

import sys
from typing import Any

from evolve_envs.progress.arithmetic import as_fraction, reached
from evolve_envs.progress.check_schedule import AnswerTiming
from evolve_envs.progress.done_rules import DoneJudge
from evolve_envs.progress.episode_state import EpisodeState, PendingCheck
from evolve_envs.progress.request_modes import RequestMode
from evolve_envs.progress.tracker_config import TrackerConfig

__all__ = ["CheckAnswers"]


class CheckAnswers:
    """Applies check answers to an episode, and closes it (docs/PROGRESS.md); one per
    tracker, sharing the tracker's request mode, done judge and answer timing.

    With ``reward_mode: sparse`` the progress level is paid when the episode closes:

    >>> from evolve_envs.progress.request_modes import REQUEST_MODES
    >>> s = TrackerConfig(reward_mode="sparse")
    >>> timing = AnswerTiming(clock=lambda: 0.0)
    >>> answers = CheckAnswers(s, REQUEST_MODES[s.mode](s), s.rule.judge(), timing)
    >>> answers.close(EpisodeState(progress=40.0))  # (model reward, answers applied, fallback)
    (0.4, 0, False)
    """

    def __init__(
        self, settings: TrackerConfig, mode: RequestMode, judge: DoneJudge, timing: AnswerTiming
    ) -> None:
        self.settings = settings
        self.mode = mode
        self.judge = judge
        self.timing = timing

    def close(self, ep: EpisodeState) -> tuple[float, int, bool]:
        """Wait for and apply every answer still out, then pay the level owed at the end
        (``sparse`` / ``binary`` without ``use_rel_reward``): ``(model reward, answers
        applied, any fallback)``. Marking the episode finished is the caller's."""
        s = self.settings
        reward, applied, fallback = 0.0, 0, False
        ep.end_waits += sum(1 for p in ep.pending if s.calls == "async" and not p.ready())
        while ep.pending:
            r, fb = self.apply(ep, ep.pending.popleft())
            reward, applied, fallback = reward + r, applied + 1, fallback or fb
        if s.reward_mode != "dense" and not s.use_rel_reward:
            final = self._level(ep.progress)
            reward += final
            ep.model_reward += final
        return reward, applied, fallback

    def apply_due(self, ep: EpisodeState, step: int) -> tuple[float, int, bool]:
        """Apply answers in send order: those back, and those that reached the max lag.
        Returns ``(model reward, answers applied, any fallback)``."""
        s = self.settings
        reward, applied, fallback = 0.0, 0, False
        while ep.pending:
            head = ep.pending[0]
            if not head.ready():
                if s.calls == "sync" or step < head.deadline:
                    break
                ep.lag_waits += 1
            r, fb = self.apply(ep, ep.pending.popleft())
            reward, applied, fallback = reward + r, applied + 1, fallback or fb
        return reward, applied, fallback

    def apply(
        self, ep: EpisodeState, p: PendingCheck, at: tuple[int, bool | None] | None = None
    ) -> tuple[float, bool]:
        """Apply the answer to ``p`` (waiting for it): ``(model reward, fallback)``. ``at``: the
        step the answer lands at and the env's success flag then, which a done judged by this
        answer records (default: the episode's current step and flag; a deferred episode's
        ledger passes the check's own step)."""
        answered = False
        try:
            result = p.critic.result()  # raises RewardServiceError in fail-fast mode
            done_result = p.done.result() if p.done is not None else None
            answered = True
        finally:
            self.timing.answered(p)
            if not answered:  # whatever raised (an interrupt too): hold the progress
                self._hold_failed(ep, p, sys.exc_info()[1])
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
        value = self.mode.value(ep, p, result.value) if result.ok else ep.progress
        self._commit(ep, p, value)

        reward = self._reward_for(ep, value)
        ep.progress = value
        ep.max_progress = max(ep.max_progress, value)
        if self._decide_done(value, result, done_result) and not ep.done:
            ep.done = True
            ep.done_step, ep.done_env_success = (ep.step, ep.env_success) if at is None else at
        return reward, fallback

    def _decide_done(self, value: float, result: Any, done_result: Any) -> bool:
        """The done decision for one applied answer: the progress threshold (a failed answer
        has no vote) and the backend's ``/done`` go to the done rule's judge
        (:mod:`evolve_envs.progress.done_rules`), which decides."""
        s = self.settings
        above = (
            reached(as_fraction(value), s.done_threshold, s.done_comparison) if result.ok else None
        )
        by_backend = (
            bool(done_result.value.done)
            if done_result is not None and done_result.ok and done_result.value is not None
            else None
        )
        return self.judge.update(above=above, backend=by_backend)

    def _commit(self, ep: EpisodeState, p: PendingCheck, value: float) -> None:
        """Record ``value`` as the progress of the check's frame when the mode keeps it as a
        base for later checks, and forget values no later check can use."""
        if self.mode.commits(p):
            ep.values[p.step] = value
            for old in [k for k in ep.values if 0 < k < p.base_step]:
                del ep.values[old]

    def _hold_failed(self, ep: EpisodeState, p: PendingCheck, exc: BaseException | None) -> None:
        """Account a check whose request raised (fail-fast mode) like a failed answer: the
        progress is held and becomes the value of the check's frame, so later checks that use
        that frame as their base find a value."""
        ep.answers += 1
        ep.errors += 1
        ep.last_error = str(exc) if exc is not None else "the request did not complete"
        self._commit(ep, p, ep.progress)

    def _level(self, value: float) -> float:
        s = self.settings
        if s.reward_mode == "binary":
            return s.reward_coef * float(as_fraction(value) >= s.success_threshold)
        return s.reward_coef * value / 100.0

    def _reward_for(self, ep: EpisodeState, value: float) -> float:
        """Model reward owed when progress moves from the current value to ``value``."""
        s = self.settings
        if s.reward_mode == "dense":
            r = s.reward_coef * (value - ep.progress) / 100.0
        elif s.use_rel_reward:
            level = self._level(value)
            r, ep.level_paid = level - ep.level_paid, level
        else:
            r = 0.0
        ep.model_reward += r
        return r
