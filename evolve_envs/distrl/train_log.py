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

import csv
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from evolve_envs.episode_log import tensorboard_available

__all__ = ["IntervalStats", "TrainLog", "format_row"]


class TrainLog:
    """Append interval rows to ``<out>/metrics.csv`` and ``<out>/tensorboard/``.

    Args:
        out: the run directory.
        tensorboard: also write TensorBoard events (skipped when the package is missing).
    """

    def __init__(self, out: str | Path, *, tensorboard: bool = True) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.out / "metrics.csv"
        self._columns: list[str] | None = None
        if self.csv_path.exists():  # a resumed run appends under the existing header
            with self.csv_path.open(newline="", encoding="utf-8") as fh:
                header = next(csv.reader(fh), None)
            self._columns = header or None
        self._tb = None
        if tensorboard and tensorboard_available():
            from tensorboard.summary import Writer

            self._tb = Writer(str(self.out / "tensorboard"))

    def add(self, step: int, metrics: Mapping[str, float | int | bool | None]) -> None:
        """Write one row (``updates`` = ``step``); None and NaN stay blank / are skipped."""
        row = {"updates": step, **metrics}
        new = self._columns is None
        if self._columns is None:
            self._columns = list(row)
        with self.csv_path.open("a", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, self._columns, extrasaction="ignore", restval="")
            if new:
                writer.writeheader()
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float | bool) and not math.isnan(float(value)):
                    self._tb.add_scalar(f"train/{key}", float(value), step=step)
            self._tb.flush()

    def close(self) -> None:
        """Close the TensorBoard writer."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self) -> TrainLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class IntervalStats:
    """Accumulates what happened since the last logged row: finished episodes, trajectories
    taken in (with their policy-version staleness), env steps and samples.

    Example:
        >>> st = IntervalStats()
        >>> st.episodes([{"return": 1.0, "success": 1.0, "progress": 0.5}])
        >>> st.row(2.0)["return"], st.row(2.0)["episodes"]
        (1.0, 1)
    """

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self._episodes: list[Mapping[str, Any]] = []
        self._staleness: list[float] = []
        self.trajectories = 0
        self.env_steps = 0
        self.samples = 0
        self.updates = 0

    def episodes(self, stats: Sequence[Mapping[str, Any]]) -> None:
        """Record finished episodes' stats dicts (``return``, ``success``, ``progress``, ...)."""
        self._episodes.extend(stats)

    def trajectory(self, traj: Any, learner_version: int) -> None:
        """Record one trajectory taken in by the learner."""
        self.trajectories += 1
        self.env_steps += len(traj)
        self._staleness.append(float(learner_version - traj.policy_version))
        self._episodes.extend(traj.episode_stats)

    def row(self, elapsed: float | None = None) -> dict[str, Any]:
        """The interval's metrics (means over its episodes; rates per second)."""
        dt = max(1e-9, elapsed if elapsed is not None else time.monotonic() - self.t0)

        def mean(key: str) -> float:
            vals = [float(e[key]) for e in self._episodes if key in e]
            vals = [v for v in vals if not math.isnan(v)]
            return sum(vals) / len(vals) if vals else math.nan

        return {
            "episodes": len(self._episodes),
            "return": mean("return"),
            "success": mean("success"),
            "model_progress": mean("progress"),
            "episode_length": mean("length"),
            "fallbacks": sum(int(e.get("fallbacks", 0)) for e in self._episodes),
            "staleness": (
                sum(self._staleness) / len(self._staleness) if self._staleness else math.nan
            ),
            "samples_per_s": self.samples / dt,
            "env_steps_per_s": self.env_steps / dt,
            "trajectories_per_s": self.trajectories / dt,
            "updates_per_s": self.updates / dt,
        }


def format_row(row: Mapping[str, Any]) -> str:
    """One metrics row as the line printed when not on a terminal."""

    def f(key: str, fmt: str = ".3g") -> str:
        v = row.get(key)
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    return (
        f"[{row['time_s']:7.1f}s] updates {row['updates_total']} v{row['version']} "
        f"return {f('return')} success {f('success')} progress {f('model_progress')} "
        f"queue {row['queue_depth']} buffer {f('buffer_fill', '.2f')} "
        f"stale {f('staleness')} steps/s {f('env_steps_per_s', '.1f')} "
        f"samples/s {f('samples_per_s', '.1f')}"
    )
