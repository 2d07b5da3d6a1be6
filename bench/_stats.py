"""Statistics of the D3 race: seeded bootstrap intervals and the exact paired sign-flip test.

* :func:`bootstrap_ci` — percentile bootstrap interval of a mean (resampling the values with
  replacement, ``numpy.random.default_rng(seed)``, so a report re-renders the same numbers);
* :func:`ratio_ci` — paired percentile bootstrap interval of a ratio of two means (the seeds
  resampled together, seeded as :func:`bootstrap_ci`);
* :func:`sign_flip_p` — the exact two-sided paired permutation test: under the null hypothesis
  each paired difference is as likely to have either sign, so the p-value is the share of all
  ``2**n`` sign patterns whose mean is at least as far from zero as the observed one (every
  pattern enumerated, no sampling; with ``n`` pairs the smallest possible p is ``2 / 2**n``).

Example:
    >>> sign_flip_p([0.1, 0.2, 0.3, 0.1, 0.4, 0.2])   # 6 positive differences: 2 of 64 patterns
    0.03125
    >>> bootstrap_ci([0.0, 1.0], seed=0)                # resampled means are 0, 0.5 or 1
    (0.0, 1.0)
    >>> ratio_ci([0.4, 0.6], [0.5, 0.5])                # resampled ratios are 0.8, 1 or 1.2
    (0.8, 1.2)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

__all__ = ["bootstrap_ci", "ratio_ci", "sign_flip_p", "MAX_EXACT_PAIRS"]

#: Largest number of pairs :func:`sign_flip_p` enumerates (2**20 patterns, about a second).
MAX_EXACT_PAIRS = 20


def _finite(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=np.float64)
    return arr[np.isfinite(arr)]


def bootstrap_ci(
    values: Sequence[float], *, level: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (non-finite values dropped);
    ``(nan, nan)`` for no values, the value itself for one."""
    arr = _finite(values)
    if arr.size == 0:
        return math.nan, math.nan
    if arr.size == 1:
        return float(arr[0]), float(arr[0])
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, size=(resamples, arr.size))].mean(axis=1)
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def ratio_ci(
    first: Sequence[float],
    second: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Paired percentile bootstrap interval of ``mean(first) / mean(second)``: the pairs (one per
    seed; a pair with a non-finite value dropped) resampled together with replacement, resamples
    whose second mean is not above zero left out. ``(nan, nan)`` for no pairs or no ratio."""
    a = np.asarray(list(first), dtype=np.float64)
    b = np.asarray(list(second), dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"ratio_ci: {a.size} and {b.size} values; pairs need as many of each")
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    if a.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(resamples, a.size))
    num, den = a[idx].mean(axis=1), b[idx].mean(axis=1)
    ratios = num[den > 0] / den[den > 0]
    if ratios.size == 0:
        return math.nan, math.nan
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)


def sign_flip_p(differences: Sequence[float]) -> float:
    """Exact two-sided p-value of the paired sign-flip test on ``differences`` (first minus
    second arm, one per seed; non-finite ones dropped). NaN for no pairs."""
    d = _finite(differences)
    n = d.size
    if n == 0:
        return math.nan
    if n > MAX_EXACT_PAIRS:
        raise ValueError(f"sign_flip_p: {n} pairs; enumerating 2**{n} patterns is too many")
    observed = abs(d.mean())
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    means = np.abs(signs @ d) / n
    # the tolerance keeps patterns whose mean equals the observed one up to rounding
    extreme = means >= observed - 1e-12 * max(1.0, observed)
    return float(extreme.sum() / signs.shape[0])
