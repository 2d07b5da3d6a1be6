"""What a :class:`~evolve_envs.progress.tracker.ProgressTracker` talks to and returns: the
progress client it needs (:class:`ProgressService`) and the record of one observed step
(:class:`TrackerStep`).

>>> TrackerStep(reward=0.5, progress=50.0, terminate=False, episode_over=False, checked=True,
...             info={}).summary is None
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from evolve_envs.progress.episode_state import Answer

__all__ = ["ProgressService", "TrackerStep"]


class ProgressService(Protocol):
    """What the tracker needs from a progress client (``evolve_envs.reward.clients.ProgressClient``
    fits)."""

    def submit_pairwise_critic(
        self, task: str, image_a: np.ndarray, image_b: np.ndarray
    ) -> Answer: ...

    def submit_trajectory_values(
        self, task: str, frames: list[np.ndarray], *, skip: int = ...
    ) -> Answer: ...

    def submit_done(
        self, task: str, first_frame: np.ndarray, prev_frame: np.ndarray, curr_frame: np.ndarray
    ) -> Answer: ...


@dataclass
class TrackerStep:
    """What :meth:`ProgressTracker.observe` returns for one step."""

    reward: float
    progress: float
    terminate: bool
    episode_over: bool
    checked: bool
    info: dict[str, object]
    summary: dict[str, object] | None = None
