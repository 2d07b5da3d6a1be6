"""The numbers of a calibration report: done precision and recall at a threshold and across
thresholds, Value-Order Correlation, the two failure modes, critics and latency (each one is
described in docs/trust.md).

Example:
    >>> import numpy as np
    >>> round(spearman(np.arange(5), np.array([0, 10, 5, 30, 40])), 2)
    0.9
    >>> value_order_correlation([0, 1, 2], [0.0, 0.0, 0.0])  # flat: says nothing about order
    0.0
    >>> pr = pr_metrics(np.array([99, 20, 97, 96]), np.array([True, False, True, False]), 95)
    >>> pr["precision"], pr["recall"]
    (0.6666666666666666, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = ["EpisodeScore", "pr_metrics", "service_metrics", "spearman", "value_order_correlation"]


@dataclass
class EpisodeScore:
    """One episode as one service judged it."""

    task: str
    success: bool
    values: list[float]
    critics: list[float]
    indices: list[int]
    latency_s: float | None
    ok: bool
    error: str | None = None
    meta: dict[str, JsonValue] = field(default_factory=dict)
    #: the service's ``/done`` verdict on the last scored frames (None: not asked or failed)
    backend_done: bool | None = None

    @property
    def max_value(self) -> float:
        return max(self.values) if self.values else math.nan

    @property
    def final_value(self) -> float:
        return self.values[-1] if self.values else math.nan


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    for value in np.unique(x):  # average ranks of ties
        tie = x == value
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation (ties get average ranks); NaN when either side is constant."""
    rx, ry = _ranks(np.asarray(x, dtype=np.float64)), _ranks(np.asarray(y, dtype=np.float64))
    if len(rx) < 2 or rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def value_order_correlation(
    indices: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray
) -> float:
    """VOC of one episode: Spearman of ``values`` against frame order ``indices``.

    A flat prediction (every value equal) is 0: it orders nothing, and counts as such instead of
    dropping out of the mean. NaN with fewer than two frames."""
    vals = np.asarray(values, dtype=np.float64)
    if len(vals) >= 2 and np.all(vals == vals[0]):
        return 0.0
    return spearman(indices, vals)


def pr_metrics(scores: np.ndarray, success: np.ndarray, threshold: float) -> dict[str, float]:
    """Precision/recall/F1 of "done when score >= threshold" against ``success``."""
    pred = np.asarray(scores) >= threshold
    truth = np.asarray(success, dtype=bool)
    tp = int(np.sum(pred & truth))
    fp = int(np.sum(pred & ~truth))
    fn = int(np.sum(~pred & truth))
    precision = tp / (tp + fp) if tp + fp else math.nan
    recall = tp / (tp + fn) if tp + fn else math.nan
    f1 = (
        2 * precision * recall / (precision + recall)
        if tp and not math.isnan(precision + recall)
        else 0.0
    )
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp, "fn": fn}


def _mean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else None


def service_metrics(scores: Sequence[EpisodeScore], threshold: float) -> dict[str, JsonValue]:
    """Every metric of the report for one service over ``scores`` (percent units)."""
    ok = [s for s in scores if s.ok and s.values]
    success = np.array([s.success for s in ok], dtype=bool)
    max_v = np.array([s.max_value for s in ok], dtype=np.float64)
    final_v = np.array([s.final_value for s in ok], dtype=np.float64)
    at = pr_metrics(max_v, success, threshold)
    curve = [{"threshold": float(t), **pr_metrics(max_v, success, float(t))} for t in range(0, 101)]
    best = max(curve, key=lambda row: (row["f1"], row["threshold"]))
    vocs = [
        value_order_correlation(s.indices, s.values) for s in ok if s.success and len(s.values) > 2
    ]
    critics = [c for s in ok for c in s.critics]
    latencies = [s.latency_s for s in scores if s.ok and s.latency_s is not None]
    asked = [s for s in scores if s.backend_done is not None]
    backend_done = (
        pr_metrics(
            np.array([float(s.backend_done) for s in asked]),
            np.array([s.success for s in asked], dtype=bool),
            0.5,
        )
        | {"episodes": len(asked)}
        if asked
        else None
    )
    return {
        "episodes": len(scores),
        "scored": len(ok),
        "failed_calls": len(scores) - len(ok),
        "successes": int(success.sum()),
        "threshold": threshold,
        "done": at,
        "backend_done": backend_done,
        "best_threshold": {k: best[k] for k in ("threshold", "precision", "recall", "f1")},
        "pr_curve": curve,
        "voc": _mean(vocs),
        "voc_episodes": len([v for v in vocs if not math.isnan(v)]),
        "voc_flat_episodes": sum(
            1 for s in ok if s.success and len(s.values) > 2 and len(set(s.values)) == 1
        ),
        "progress_at_success": _mean(list(final_v[success])),
        "max_progress_on_failure": _mean(list(max_v[~success])),
        "failures_judged_high": int(np.sum((max_v >= threshold) & ~success)),
        "successes_judged_low": int(np.sum((final_v < threshold) & success)),
        "negative_critic_rate": (float(np.mean(np.array(critics) < 0)) if critics else None),
        "latency_p50_s": float(np.percentile(latencies, 50)) if latencies else None,
        "latency_p95_s": float(np.percentile(latencies, 95)) if latencies else None,
    }
