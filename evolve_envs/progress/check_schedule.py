"""When a tracker sends its checks and when it waits for their answers.

>>> from evolve_envs.progress.tracker_config import TrackerConfig
>>> s = TrackerConfig(calls="async", start_step=2, call_every=2, max_lag_steps="auto")
>>> answer_deadline(s, AnswerTiming(clock=lambda: 0.0), 4)  # nothing measured: 4 * call_every
12
"""

from __future__ import annotations

import collections
import math
import sys
from collections.abc import Callable
from typing import Any

from evolve_envs.progress.arithmetic import is_check_step
from evolve_envs.progress.episode_state import EpisodeState, PendingCheck
from evolve_envs.progress.tracker_config import TrackerConfig

__all__ = ["AnswerTiming", "answer_deadline", "ceil_steps", "check_now", "episode_limit"]


def ceil_steps(steps: float) -> int:
    """``ceil`` that ignores float noise (36.0000000001 steps are 36).

    >>> ceil_steps(36.0000000001), ceil_steps(36.01)
    (36, 37)
    """
    return math.ceil(round(steps, 6))


def check_now(s: TrackerConfig, ep: EpisodeState, timing: AnswerTiming, step: int) -> bool:
    """Whether a check is sent at ``step``: the grid's, unless ``last_check="before_limit"``
    moves the late end of it (docs/PROGRESS.md). Marks ``ep.final_sent`` when it sends
    the moved last check."""
    grid = is_check_step(step, start_step=s.start_step, call_every=s.call_every)
    limit = ep.limit
    if s.last_check == "grid" or s.calls != "async" or limit is None or step > limit:
        return grid
    if ep.final_sent or step < s.start_step:
        return False
    upcoming = step + (s.start_step - step) % s.call_every  # the next grid check >= step
    if upcoming > limit:
        return False
    lead = timing.lead_steps()
    if lead is None or step <= limit - lead:
        return grid
    # past the cutoff with a grid check still ahead: its answer would come after the limit,
    # so the last check is sent now, unless the previous one is recent enough to be it
    ep.final_sent = True
    return ep.last_sent_step == 0 or 2 * (step - ep.last_sent_step) >= s.call_every


def answer_deadline(s: TrackerConfig, timing: AnswerTiming, step: int) -> int:
    """The step at which the answer to the check sent at ``step`` is waited for."""
    if s.calls == "sync":
        return step
    if s.calls == "deferred":  # never waited for mid-episode
        return sys.maxsize
    if s.max_lag_steps != "auto":
        return step + s.max_lag_steps
    latency = timing.latency_steps()
    if latency is None:
        return step + 4 * s.call_every
    return step + ceil_steps(1.25 * latency) + 2


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


class AnswerTiming:
    """Async timing kept across episodes: the latencies of the last answers (seconds from the
    request to its last answer) and the last env step times (seconds between ``observe``
    calls). Answer times are written by the futures' callbacks (one float each); everything
    else happens on the tracker's thread.

    >>> timing = AnswerTiming(clock=lambda: 0.0)
    >>> timing.latencies.append(0.5); timing.record_step(0.25)
    >>> timing.latency_steps(), timing.lead_steps()
    (2.0, 3)
    """

    def __init__(self, clock: Callable[[], float], latencies: int = 32, steps: int = 64) -> None:
        self.clock = clock
        self.latencies: collections.deque[float] = collections.deque(maxlen=latencies)
        self.steps: collections.deque[float] = collections.deque(maxlen=steps)
        self._cache: tuple[int, float | None] = (-1, None)
        self._version = 0

    def record_step(self, seconds: float) -> None:
        self.steps.append(seconds)
        self._version += 1

    def track(self, p: PendingCheck) -> None:
        p.sent_at = self.clock()
        for future in (p.critic, p.done):
            if future is not None:
                future.add_done_callback(lambda _f: p.answered_at.append(self.clock()))

    def answered(self, p: PendingCheck) -> None:
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
        return None if latency is None else ceil_steps(latency) + 1
