"""Per-sub-env episode state of the RLinf adapter, and the info keys it writes for RLinf.

:class:`SubEnvEpisodes` keeps each sub-env's step count, return and end-of-episode statistics;
:func:`annotate` writes them into RLinf's ``infos`` and ``episode`` blocks (the keys:
docs/rlinf.md, "What changes in training").

    >>> task_of({"task_descriptions": ["open the drawer"]}, "task_descriptions", 0, None)
    'open the drawer'
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from evolve_envs.integrations.rlinf.frames import to_upright
from evolve_envs.progress.episode_summary import model_done
from evolve_envs.progress.reward_step import RewardStep, StepEnd
from evolve_envs.progress.tracker import ProgressTracker
from evolve_envs.training.common.arrays import to_numpy

__all__ = ["SubEnvEpisodes", "annotate", "frame_getter", "task_of", "write_episode_block"]

logger = logging.getLogger(__name__)


def _torch():
    import torch

    return torch


def frame_getter(images: Any, i: int, orientation: str = "upright") -> Callable[[], np.ndarray]:
    """A callable returning sub-env ``i``'s frame as a uint8 array, turned upright."""

    def get() -> np.ndarray:
        frame = to_numpy(images[i])
        if orientation == "upright":
            return frame
        return np.ascontiguousarray(to_upright(frame, orientation))

    return get


def task_of(obs: Mapping[str, object], key: str, i: int, fallback: object) -> str:
    """Sub-env ``i``'s instruction text from ``obs[key]`` (else ``fallback``)."""
    tasks = obs.get(key) if isinstance(obs, Mapping) else None
    if tasks is None:
        tasks = fallback
    try:
        task = tasks[i]
    except (TypeError, IndexError, KeyError):
        task = None
    if not isinstance(task, str) or not task.strip():
        raise ValueError(
            f"sub-env {i} has no task description (observation key {key!r}); the progress "
            "reward model needs the instruction text"
        )
    return task


def _dtype_of(value: object) -> type:
    if isinstance(value, bool):
        return bool
    return np.int64 if isinstance(value, int) else np.float32


#: Episode-block keys that run across episodes (kept when a sub-env restarts).
RUNNING_KEYS = ("model_done_total", "model_done_success_total", "model_done_precision",
                "alarm_progress_rise", "alarm_success_rise", "alarm_high_failure_rise",
                "alarm_firing", "alarm_triggers")  # fmt: skip


class SubEnvEpisodes:
    """Each sub-env's running episode: ``steps``, ``returns`` of the rewards paid, and the
    statistics set when it ends (:meth:`record_end`); :meth:`stats_arrays` gives them per key."""

    def __init__(self, trackers: Sequence[ProgressTracker], step: RewardStep | None = None) -> None:
        self.trackers = trackers
        self.step = step if step is not None else RewardStep()
        self.alarm = self.step.alarm
        n = len(trackers)
        self.steps = np.zeros(n, dtype=np.int64)
        self.returns = np.zeros(n, dtype=np.float64)  # the rewards the adapter returned
        self._ended = [self.episode_end_stats() for _ in range(n)]
        #: episodes (all sub-envs) that got fallback rewards because reward-model calls failed
        self.fallback_episodes = 0

    def episode_end_stats(self, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The episode-end keys as they stand before the end (running keys from ``previous``)."""
        stats: dict[str, Any] = {
            "model_done": False,
            "model_done_success": False,
            "model_done_total": 0,
            "model_done_success_total": 0,
            "model_done_precision": float("nan"),
        }
        if self.alarm is not None:
            stats.update(
                alarm_progress_rise=0.0,
                alarm_success_rise=0.0,
                alarm_high_failure_rise=0.0,
                alarm_firing=False,
                alarm_triggers=0,
            )
        if previous is not None:
            stats.update({k: previous[k] for k in RUNNING_KEYS if k in previous and k in stats})
        return stats

    def start(self, i: int, task: str, frame: np.ndarray) -> None:
        """Start sub-env ``i``'s episode on ``task`` from its reset ``frame``."""
        self.trackers[i].reset(task, frame)
        self.steps[i] = 0
        self.returns[i] = 0.0
        self._ended[i] = self.episode_end_stats(self._ended[i])

    def record_end(self, i: int, summary: Mapping[str, object]) -> StepEnd:
        """An episode of sub-env ``i`` ended: its termination audit, and the reward step's end
        (the bonus it earns, the alarm's numbers), which is returned."""
        stats = self._ended[i]
        if int(summary.get("reward_model_fallbacks") or 0) > 0:
            self.fallback_episodes += 1
            if self.fallback_episodes == 1:  # loud once; env/reward_model_fallback_episodes counts
                logger.warning(
                    "the reward service is failing (%s): an episode of sub-env %d got %d fallback "
                    "reward(s); episodes scored by the fallback are counted in "
                    "env/reward_model_fallback_episodes, and their return is not the model's "
                    "(reward_model.fail_on_request_error=true stops the run instead)",
                    summary.get("last_error") or "no answer",
                    i,
                    int(summary["reward_model_fallbacks"]),
                )
        audit = summary.get("termination_audit") or {}
        # the adapter decides termination itself: count the model's "done", ended or not
        stats.update(model_done(summary, terminated_only=False))
        stats["model_done_total"] = int(audit.get("model_done", 0))
        stats["model_done_success_total"] = int(audit.get("model_done_success", 0))
        stats["model_done_precision"] = self.model_done_precision()
        task = summary.get("task")
        end = self.step.end(summary, None if task is None else str(task), None)
        if end.alarm is not None:
            state = end.alarm
            for key in ("progress_rise", "success_rise", "high_failure_rise"):
                stats[f"alarm_{key}"] = float(state[key] or 0.0)
            stats["alarm_firing"] = bool(state["firing"])
            stats["alarm_triggers"] = int(state["triggers"])
        return end

    def model_done_precision(self) -> float:
        """Model-ended episodes the env judged successful / model-ended episodes (NaN: none)."""
        audits = {id(t.audit): t.audit for t in self.trackers}.values()
        counts = [a.counts() for a in audits]
        done = sum(c["model_done"] for c in counts)
        return sum(c["model_done_success"] for c in counts) / done if done else float("nan")

    def stats_arrays(self) -> dict[str, np.ndarray]:
        """Each sub-env's episode statistics, per episode-block key."""
        totals = [t.totals() for t in self.trackers]

        def col(key: str, dtype: type) -> np.ndarray:
            return np.array([tot[key] for tot in totals], dtype=dtype)

        ended = {
            key: np.array([e[key] for e in self._ended], dtype=_dtype_of(default))
            for key, default in self._ended[0].items()
        }
        return {
            "progress": col("progress", np.float32),
            "max_progress": col("max_progress", np.float32),
            "done_by_progress": col("done_by_progress", bool),
            "reward_model_return": col("model_reward", np.float32),
            "reward_model_calls": col("progress_calls", np.int64),
            "reward_model_errors": col("reward_model_errors", np.int64),
            "reward_model_fallback_episodes": np.full(len(totals), self.fallback_episodes),
            "return": self.returns.astype(np.float32),
            "reward": (self.returns / np.maximum(self.steps, 1)).astype(np.float32),
            **ended,
        }


def write_episode_block(block: dict[str, Any], stats: dict[str, np.ndarray]) -> None:
    """The statistics into the env's ``episode`` block; the env's own ``return`` / ``reward`` move
    to ``env_return`` / ``env_reward_mean``."""
    torch = _torch()
    for key, moved in (("return", "env_return"), ("reward", "env_reward_mean")):
        if key in block and moved not in block:
            block[moved] = block[key]
    for key, values in stats.items():
        block[key] = torch.from_numpy(values.copy())


def annotate(
    infos_list: list[object],
    env_r: np.ndarray,
    model_r: np.ndarray,
    progress: np.ndarray,
    done_flag: np.ndarray,
    snapshots: list[dict[str, np.ndarray]],
) -> None:
    """Each step's rewards, progress and episode statistics into the chunk's ``infos``."""
    torch = _torch()
    for t, infos in enumerate(infos_list):
        if not isinstance(infos, dict):
            continue
        infos["progress"] = torch.from_numpy(progress[:, t].copy())
        infos["reward_model_reward"] = torch.from_numpy(model_r[:, t].astype(np.float32))
        infos["env_reward"] = torch.from_numpy(env_r[:, t].astype(np.float32))
        infos["done_by_progress"] = torch.from_numpy(done_flag[:, t].copy())
        if isinstance(infos.get("episode"), dict):
            write_episode_block(infos["episode"], snapshots[t])
