"""Progress arithmetic shared by the reward wrappers, the service and its backends: critic
accumulation (the ``vlac`` and ``robodopamine`` rules of docs/PROGRESS.md), its inverse and
VLAC's reference-frame choice.

Example:
    >>> accumulate(0.0, 40.0), critic_between(40.0, 70.0)
    (40.0, 50.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

__all__ = [
    "NegativeRule",
    "NEGATIVE_RULES",
    "clamp_progress",
    "clamp_critic",
    "accumulate",
    "accumulate_all",
    "critic_between",
    "value_list",
    "reference_indices",
]

NegativeRule = Literal["vlac", "robodopamine"]
NEGATIVE_RULES: tuple[str, ...] = ("vlac", "robodopamine")


def clamp_progress(value: float) -> float:
    """Clamp a progress value to ``[0, 100]`` (NaN becomes 0)."""
    v = float(value)
    if math.isnan(v):
        return 0.0
    return min(100.0, max(0.0, v))


def clamp_critic(critic: float) -> float:
    """Clamp a critic value to ``[-100, 100]`` (NaN becomes 0: "no change")."""
    c = float(critic)
    if math.isnan(c):
        return 0.0
    return min(100.0, max(-100.0, c))


def accumulate(value: float, critic: float, rule: NegativeRule = "vlac") -> float:
    """The progress after a frame judged ``critic`` from ``value``; inputs and result clamped."""
    if rule not in NEGATIVE_RULES:
        raise ValueError(f"negative_rule must be one of {NEGATIVE_RULES}, got {rule!r}")
    v = clamp_progress(value)
    c = clamp_critic(critic)
    if c < 0 and rule == "robodopamine":
        return clamp_progress(v + v * c / 100.0)
    return clamp_progress(v + (100.0 - v) * c / 100.0)


def accumulate_all(
    critics: Iterable[float], start: float = 0.0, rule: NegativeRule = "vlac"
) -> list[float]:
    """Progress after each critic of a sequence, starting from ``start``."""
    values: list[float] = []
    v = clamp_progress(start)
    for c in critics:
        v = accumulate(v, c, rule)
        values.append(v)
    return values


def critic_between(value_a: float, value_b: float) -> float:
    """The critic that the ``vlac`` rule maps from ``value_a`` to ``value_b``, clamped to [-100,
    100]."""
    a, b = clamp_progress(value_a), clamp_progress(value_b)
    if a >= 100.0:
        return 0.0 if b >= 100.0 else -100.0
    return clamp_critic(100.0 * (b - a) / (100.0 - a))


def value_list(critics: Sequence[float]) -> list[float]:
    """VLAC's ``critic_to_value_simple``: ``v ← v + (100 − v)·c/100`` from 0, not clamped
    (``len(critics) + 1`` values; the service's ``/trajectory-critic`` answer)."""
    values = [0.0]
    for c in critics:
        values.append(values[-1] + (100.0 - values[-1]) * float(c) / 100.0)
    return values


def reference_indices(count: int, ref_num: int | None) -> list[int]:
    """VLAC's reference sampling: the first frame and ``ref_num - 1`` others evenly up to the last.

    >>> reference_indices(10, 4), reference_indices(3, None)
    ([0, 3, 6, 9], [0, 1, 2])
    """
    if ref_num is not None and ref_num <= 1:
        return list(range(min(count, 1)))
    if ref_num is None or ref_num >= count:
        return list(range(count))
    delta = (count - 1) / (ref_num - 1)
    return [int(i * delta) for i in range(ref_num)]
