"""LeRobot's per-feature statistics (``meta/stats.json``, ``stats`` of each episode), computed
as LeRobot computes them.

>>> import numpy as np
>>> s = feature_stats(np.array([[0.0], [2.0], [4.0]]))
>>> s["min"].tolist(), s["max"].tolist(), s["mean"].tolist(), s["count"].tolist()
([0.0], [4.0], [2.0], [3])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["QUANTILES", "aggregate_stats", "feature_stats", "image_stats"]

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)


def _estimate_samples(n: int) -> int:
    """How many frames LeRobot samples for image statistics: ``n**0.75`` in [100, 10000]."""
    return min(n, max(100, min(int(n**0.75), 10_000)))


def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """min, max, mean, std, count and the quantiles of ``[N]`` or ``[N, D]`` values, per
    dimension (a scalar feature keeps a dimension of 1, as LeRobot stores it)."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr.reshape(len(arr), -1)
    stats = {
        "min": arr.min(axis=0),
        "max": arr.max(axis=0),
        "mean": arr.mean(axis=0),
        "std": arr.std(axis=0),
        "count": np.array([len(arr)]),
    }
    for q in QUANTILES:
        stats[f"q{round(q * 100):02d}"] = np.quantile(arr, q, axis=0)
    return stats


def image_stats(frames: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Per-channel statistics of ``HxWx3`` uint8 frames, in [0, 1], shaped ``(3, 1, 1)``: on an
    evenly spaced sample of the frames as LeRobot draws it, each downsampled to at most 96
    pixels a side (the statistics of a whole scene's colours, not of its details)."""
    picks = np.round(np.linspace(0, len(frames) - 1, _estimate_samples(len(frames)))).astype(int)
    side = max(np.asarray(frames[0]).shape[:2])
    step = -(-side // 96)  # every step-th pixel: at most 96 a side (LeRobot: ~150 above 300)
    sample = np.stack([np.asarray(frames[i], np.uint8)[::step, ::step] for i in picks])
    # uint8 pixels: every statistic, quantiles included, is exact from a 256-bin histogram
    counts = np.bincount(
        (sample.reshape(-1, 3) + np.array([0, 256, 512], np.uint16)).ravel(), minlength=768
    )
    per_channel = [_histogram_stats(counts[256 * c : 256 * (c + 1)]) for c in range(3)]
    out = {k: np.array([s[k] for s in per_channel]).reshape(3, 1, 1) for k in per_channel[0]}
    out["count"] = np.array([len(sample)])
    return out


def _histogram_stats(hist: np.ndarray) -> dict[str, float]:
    """min, max, mean, std and quantiles (numpy's linear interpolation) of pixel values / 255
    counted in ``hist`` (``hist[v]`` pixels of value ``v``)."""
    values = np.arange(len(hist)) / 255.0
    n = int(hist.sum())
    mean = float((hist * values).sum() / n)
    var = float((hist * values**2).sum() / n - mean**2)
    seen = np.flatnonzero(hist)
    ends = np.cumsum(hist)

    def order(k: int) -> float:  # the k-th smallest value (0-based)
        return float(values[np.searchsorted(ends, k, side="right")])

    out = {
        "min": float(values[seen[0]]),
        "max": float(values[seen[-1]]),
        "mean": mean,
        "std": float(np.sqrt(max(var, 0.0))),
    }
    for q in QUANTILES:
        pos = q * (n - 1)
        lo = int(np.floor(pos))
        a, b = order(lo), order(min(lo + 1, n - 1))
        out[f"q{round(q * 100):02d}"] = a + (pos - lo) * (b - a)
    return out


def aggregate_stats(per_episode: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One feature's statistics over several episodes: count-weighted mean, pooled variance,
    min of minima, max of maxima; quantiles as LeRobot bounds them (the lowest of the episodes'
    for q <= 50, the highest above).

    >>> a, b = feature_stats(np.array([0.0, 2.0])), feature_stats(np.array([4.0, 6.0]))
    >>> s = aggregate_stats([a, b])
    >>> float(s["mean"][0]), float(s["std"][0]) == float(np.std([0, 2, 4, 6])), int(s["count"][0])
    (3.0, True, 4)
    """
    counts = np.array([float(s["count"][0]) for s in per_episode])
    total = counts.sum()
    means = np.stack([s["mean"] for s in per_episode])
    shape = (-1,) + (1,) * (means.ndim - 1)
    weights = counts.reshape(shape)
    mean = (means * weights).sum(axis=0) / total
    variances = np.stack([s["std"] ** 2 for s in per_episode])
    var = ((variances + (means - mean) ** 2) * weights).sum(axis=0) / total
    out = {
        "min": np.min(np.stack([s["min"] for s in per_episode]), axis=0),
        "max": np.max(np.stack([s["max"] for s in per_episode]), axis=0),
        "mean": mean,
        "std": np.sqrt(var),
        "count": np.array([int(total)]),
    }
    for key in per_episode[0]:
        if key.startswith("q") and key[1:].isdigit():
            values = np.stack([s[key] for s in per_episode])
            out[key] = values.min(axis=0) if int(key[1:]) <= 50 else values.max(axis=0)
    return out
