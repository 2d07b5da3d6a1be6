"""The entropy floor both learners share: an entropy coefficient that grows below a target.

With an ``entropy_target`` (``learner.entropy_target`` for DistRL, ``grpo.entropy_target`` for
GRPO) the coefficient of the entropy bonus is multiplied after each optimizer step by
``exp(rate · (target − H))``, with ``H`` the policy's entropy on that step's data, and kept
between the configured ``entropy_coef`` and 1: it grows while the policy is less random than the
target and decays back to the configured value once it is above it.

Example:
    >>> round(next_entropy_coef(0.01, base=0.01, target=1.2, entropy=0.2, rate=0.05), 5)
    0.01051
    >>> next_entropy_coef(0.02, base=0.01, target=1.2, entropy=5.0, rate=0.5)
    0.01
    >>> next_entropy_coef(0.02, base=0.01, target=None, entropy=0.0, rate=0.05)
    0.02
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
