"""The entropy floor both learners share: the entropy coefficient grows by
``exp(rate · (target − H))`` while the policy's entropy ``H`` is below the target, between the
configured coefficient and 1.

Example:
    >>> round(next_entropy_coef(0.01, base=0.01, target=1.2, entropy=0.2, rate=0.05), 5)
    0.01051
"""

from __future__ import annotations

import math

__all__ = ["next_entropy_coef"]


def next_entropy_coef(
    coef: float, *, base: float, target: float | None, entropy: float, rate: float
) -> float:
    """The coefficient after one step (unchanged without a target or with a non-finite
    entropy)."""
    if target is None or not math.isfinite(entropy):
        return coef
    return min(1.0, max(base, coef * math.exp(rate * (target - entropy))))
