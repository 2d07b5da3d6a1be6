"""Training metrics, one row per logging interval: ``metrics.csv`` and TensorBoard.

The CSV header is fixed by the first row (later rows leave missing columns blank); TensorBoard
gets one ``train/<column>`` scalar series per numeric column, the update count as step. Every
row is flushed, so an interrupted run keeps what it logged.

Example:
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> with TrainLog(out, tensorboard=False) as log:
    ...     log.add(10, {"return": 0.5, "buffer_fill": 0.25})
    >>> (out / "metrics.csv").read_text().splitlines()
    ['updates,return,buffer_fill', '10,0.5,0.25']
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from evolve_envs.recording.metrics_log import EpisodeLog

if TYPE_CHECKING:
    from evolve_envs.training.common.trajectory import Trajectory

__all__ = ["IntervalStats", "TrainLog", "format_row"]


class TrainLog(EpisodeLog):
    """Append interval rows to ``<out>/metrics.csv`` (first column ``updates``),
    ``<out>/tensorboard/`` (series ``train/<column>``) and, with ``wandb_project``, a W&B run:
    an :class:`~evolve_envs.recording.metrics_log.EpisodeLog` keyed by the learner's update
    count; a resumed run appends under its header.

    Args:
        out: the run directory.
        tensorboard: also write TensorBoard events (skipped when the package is missing).
        wandb_project: also log to this W&B project (the run's files go to ``out/wandb``).
        run_config: the W&B run's config (the training config, its token hidden).
    """

    def __init__(
        self,
        out: str | Path,
        *,
        tensorboard: bool = True,
        wandb_project: str | None = None,
        run_config: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(
            out,
            tensorboard=tensorboard,
            wandb_project=wandb_project,
            run_config=run_config,
            step_column="updates",
            tb_prefix="train",
        )


class IntervalStats:
    """Accumulates what happened since the last logged row: finished episodes, trajectories
    taken in (with their policy-version staleness), env steps and samples.

    Example:
        >>> st = IntervalStats()
        >>> st.episodes([{"return": 1.0, "success": 1.0, "progress": 0.5},
        ...              {"return": 0.2, "success": 0.0, "model_done": 1.0,
        ...               "model_done_success": 0.0}])
        >>> row = st.row(2.0)
        >>> row["return"], row["episodes"], row["model_done"], row["model_done_precision"]
        (0.6, 2, 1, 0.0)
    """

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self._episodes: list[Mapping[str, object]] = []
        self._staleness: list[float] = []
        self.trajectories = 0
        self.env_steps = 0
        self.samples = 0
        self.updates = 0

    def episodes(self, stats: Sequence[Mapping[str, object]]) -> None:
        """Record finished episodes' stats dicts (``return``, ``success``, ``progress``, ...)."""
        self._episodes.extend(stats)

    def trajectory(self, traj: Trajectory, learner_version: int) -> None:
        """Record one trajectory taken in by the learner."""
        self.trajectories += 1
        self.env_steps += len(traj)
        self._staleness.append(float(learner_version - traj.policy_version))
        self._episodes.extend(traj.episode_stats)

    def fallback_reason(self) -> str | None:
        """The last reward-model error of the interval's episodes that got fallback rewards."""
        reasons = [e["fallback_reason"] for e in self._episodes if e.get("fallback_reason")]
        return str(reasons[-1]) if reasons else None

    def row(self, elapsed: float | None = None) -> dict[str, object]:
        """The interval's metrics (means over its episodes; rates per second)."""
        dt = max(1e-9, elapsed if elapsed is not None else time.monotonic() - self.t0)

        def mean(key: str) -> float:
            vals = [float(e[key]) for e in self._episodes if key in e]
            vals = [v for v in vals if not math.isnan(v)]
            return sum(vals) / len(vals) if vals else math.nan

        model_done = sum(float(e.get("model_done", 0.0)) for e in self._episodes)
        fallback_episodes = sum(1 for e in self._episodes if int(e.get("fallbacks", 0)) > 0)
        model_done_success = sum(float(e.get("model_done_success", 0.0)) for e in self._episodes)
        return {
            "episodes": len(self._episodes),
            "return": mean("return"),
            "success": mean("success"),
            "model_progress": mean("progress"),
            "episode_length": mean("length"),
            # steps paid a fallback reward (a reward-model call failed), and the share of the
            # interval's episodes that got any: a dead model shows here, not as a speed-up
            "fallbacks": sum(int(e.get("fallbacks", 0)) for e in self._episodes),
            "fallback_episodes": fallback_episodes,
            "fallback_share": (
                fallback_episodes / len(self._episodes) if self._episodes else math.nan
            ),
            # model termination audited against env success (NaN: the model ended no episode)
            "model_done": int(model_done),
            "model_done_precision": model_done_success / model_done if model_done else math.nan,
            # share of the interval's episodes that ended with the hacking alarm firing
            "alarm_firing": mean("alarm_firing"),
            "staleness": (
                sum(self._staleness) / len(self._staleness) if self._staleness else math.nan
            ),
            "samples_per_s": self.samples / dt,
            "env_steps_per_s": self.env_steps / dt,
            "trajectories_per_s": self.trajectories / dt,
            "updates_per_s": self.updates / dt,
        }


def format_row(row: Mapping[str, object]) -> str:
    """One metrics row as the line printed when not on a terminal; the success is the env's
    flag, the progress the reward model's, and the line says which. When reward-model calls
    failed in the interval it ends with ``FALLBACK`` and the share of episodes that got fallback
    rewards, next to the throughput they inflate.

    >>> row = {"time_s": 20.0, "updates_total": 4, "version": 5, "return": 0.05, "success": 0.0,
    ...        "model_progress": 4.7, "queue_depth": 1, "buffer_fill": 0.12}
    >>> format_row(row).split(" stale")[0]
    '[   20.0s] updates 4 v5 return 0.05 env-success 0 model-progress 4.7 queue 1 buffer 0.12'
    >>> format_row({**row, "fallbacks": 40, "fallback_share": 0.5}).split("samples/s - ")[1]
    'FALLBACK 50%'
    """

    def f(key: str, fmt: str = ".3g") -> str:
        v = row.get(key)
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    return (
        f"[{row['time_s']:7.1f}s] updates {row['updates_total']} v{row['version']} "
        f"return {f('return')} env-success {f('success')} model-progress {f('model_progress')} "
        f"queue {row['queue_depth']} buffer {f('buffer_fill', '.2f')} "
        f"stale {f('staleness')} steps/s {f('env_steps_per_s', '.1f')} "
        f"samples/s {f('samples_per_s', '.1f')}"
        + (f" FALLBACK {row['fallback_share']:.0%}" if (row.get("fallbacks") or 0) > 0 else "")
        + (f" done-precision {f('model_done_precision', '.2f')}" if row.get("model_done") else "")
        + (" ALARM" if (row.get("alarm_firing") or 0) > 0 else "")
    )
