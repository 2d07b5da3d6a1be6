"""The per-episode records a :class:`~evolve_envs.progress.tracker.ProgressTracker` keeps.

>>> ep = EpisodeState(task="open the drawer")
>>> ep.values, ep.progress, len(ep.pending)
({0: 0.0}, 0.0, 0)
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from evolve_envs.reward.clients.results import CallResult

__all__ = ["Frame", "FrameHolder", "EpisodeState", "PendingCheck"]

Frame = np.ndarray | Callable[[], np.ndarray]
"""A frame, or a zero-argument callable returning one (materialised only on check steps)."""


#: a check's answer, as the client's ``submit_*`` returns it
Answer = Future[CallResult[object]]


@dataclass
class PendingCheck:
    """One check sent and not yet applied: its step, the step of the frame it is measured
    against (``base_step``), whether it is a milestone, and the futures of its answers.

    >>> done: Future[Any] = Future()
    >>> p = PendingCheck(step=4, base_step=0, milestone=True, critic=done)
    >>> p.ready(), done.set_result(None), p.ready()
    (False, None, True)
    """

    step: int
    base_step: int
    milestone: bool
    critic: Answer
    done: Answer | None = None
    deadline: int = 0  # the step at which the answer is waited for (async)
    sent_at: float = 0.0  # clock time of the request (async)
    answered_at: list[float] = field(default_factory=list)  # clock times of its answers
    frame_bytes: int = 0  # bytes of the frames its request carries (deferred: reported)

    def ready(self) -> bool:
        return self.critic.done() and (self.done is None or self.done.done())


@dataclass
class EpisodeState:
    """The open (or last settled) episode of a tracker; docs/PROGRESS.md."""

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
    pending: collections.deque[PendingCheck] = field(default_factory=collections.deque)
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
    summary: dict[str, object] | None = None


class FrameHolder:
    """Materialise a frame (array or callable) at most once.

    >>> calls = []
    >>> holder = FrameHolder(lambda: calls.append(1) or np.zeros((2, 2, 3), np.uint8))
    >>> holder.get().shape, holder.get().shape, len(calls)
    ((2, 2, 3), (2, 2, 3), 1)
    """

    __slots__ = ("_source", "_frame")

    def __init__(self, source: Frame) -> None:
        self._source = source
        self._frame: np.ndarray | None = None

    def get(self) -> np.ndarray:
        if self._frame is None:
            src = self._source
            self._frame = np.asarray(src() if callable(src) else src)
        return self._frame
