"""The tracker's three request modes: what a check asks the service, which frames it keeps,
and how the answer becomes progress.

>>> from evolve_envs.progress.tracker_config import TrackerConfig
>>> mode = REQUEST_MODES["incremental"](TrackerConfig(mode="incremental"))
>>> ep = EpisodeState(task="open the drawer")
>>> mode.keep(ep, 4, np.zeros((2, 2, 3), np.uint8), milestone=True)
>>> ep.prev_check_step, sorted(ep.frames)
(4, [4])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from evolve_envs.progress.arithmetic import accumulate, clamp_progress, is_milestone
from evolve_envs.progress.episode_state import Answer, EpisodeState, PendingCheck
from evolve_envs.progress.frame_store import uniform_indices
from evolve_envs.progress.tracker_config import TrackerConfig

__all__ = ["RequestMode", "PairwiseMode", "IncrementalMode", "TrajectoryMode", "REQUEST_MODES"]

Call = Callable[..., Answer]
"""``call(method, *args)``: ask the client (the tracker's ``_call``)."""


class RequestMode:
    """One request mode: what a check asks, which frames it keeps, how an answer becomes
    progress. Chosen once per tracker from ``TrackerConfig.mode``."""

    def __init__(self, settings: TrackerConfig) -> None:
        self.settings = settings

    def send(
        self, call: Call, ep: EpisodeState, step: int, frame: np.ndarray
    ) -> tuple[int, bool, Answer]:
        """Send the check at ``step`` with ``call(method, *args)``: ``(base step, milestone,
        future)``."""
        raise NotImplementedError

    def keep(self, ep: EpisodeState, step: int, frame: np.ndarray, milestone: bool) -> None:
        """Keep (a copy of) the frames later checks need."""
        raise NotImplementedError

    def value(self, ep: EpisodeState, p: PendingCheck, answer: Any) -> float:
        """Progress after the (successful) answer to ``p``."""
        return accumulate(ep.values[p.base_step], answer, self.settings.negative_rule)

    def commits(self, p: PendingCheck) -> bool:
        """The check's value is kept as the base of later checks."""
        return True

    @staticmethod
    def _replace_base(ep: EpisodeState, step: int, frame: np.ndarray) -> None:
        if ep.prev_check_step != 0:
            ep.frames.pop(ep.prev_check_step, None)
        ep.frames[step] = np.array(frame, copy=True)
        ep.prev_check_step = step


class PairwiseMode(RequestMode):
    """Critic between the last milestone frame and the current one; milestones commit."""

    def send(
        self, call: Call, ep: EpisodeState, step: int, frame: np.ndarray
    ) -> tuple[int, bool, Answer]:
        base = ep.milestone_step
        future = call("pairwise_critic", ep.task, ep.frames[base], frame)
        return base, is_milestone(step, ep.milestone_step, self.settings.milestone_every), future

    def keep(self, ep: EpisodeState, step: int, frame: np.ndarray, milestone: bool) -> None:
        if milestone:
            if ep.milestone_step != 0:
                ep.frames.pop(ep.milestone_step, None)
            ep.frames[step] = np.array(frame, copy=True)
            ep.milestone_step = step

    def commits(self, p: PendingCheck) -> bool:
        return p.milestone


class IncrementalMode(RequestMode):
    """Critic between the previous check frame and the current one, accumulated."""

    def send(
        self, call: Call, ep: EpisodeState, step: int, frame: np.ndarray
    ) -> tuple[int, bool, Answer]:
        base = ep.prev_check_step
        return base, True, call("pairwise_critic", ep.task, ep.frames[base], frame)

    def keep(self, ep: EpisodeState, step: int, frame: np.ndarray, milestone: bool) -> None:
        self._replace_base(ep, step, frame)


class TrajectoryMode(RequestMode):
    """``/trajectory-critic`` over the check frames (at most ``trajectory_max_frames``)."""

    def send(
        self, call: Call, ep: EpisodeState, step: int, frame: np.ndarray
    ) -> tuple[int, bool, Answer]:
        kept = ep.check_frames + [(step, frame)]
        idx = uniform_indices(len(kept), self.settings.trajectory_max_frames)
        future = call("trajectory_values", ep.task, [kept[i][1] for i in idx], skip=1)
        return ep.prev_check_step, False, future

    def keep(self, ep: EpisodeState, step: int, frame: np.ndarray, milestone: bool) -> None:
        self._replace_base(ep, step, frame)
        ep.check_frames.append((step, ep.frames[step]))
        limit = self.settings.trajectory_max_frames
        if len(ep.check_frames) > 4 * limit:
            idx = uniform_indices(len(ep.check_frames), 2 * limit)
            ep.check_frames = [ep.check_frames[i] for i in idx]

    def value(self, ep: EpisodeState, p: PendingCheck, answer: Any) -> float:
        if answer is not None and len(answer.value_list) > 0:
            return clamp_progress(answer.value_list[-1])
        return ep.progress


REQUEST_MODES: dict[str, type[RequestMode]] = {
    "pairwise": PairwiseMode,
    "incremental": IncrementalMode,
    "trajectory": TrajectoryMode,
}
