"""Pure progress arithmetic: critic accumulation, the check schedule, thresholds.

>>> from evolve_envs.progress.arithmetic import accumulate, is_check_step, reached
>>> v = accumulate(0.0, 40.0)
>>> v = accumulate(v, 50.0)
>>> v, accumulate(v, -50.0, rule="robodopamine")
(70.0, 35.0)
>>> is_check_step(80, start_step=64, call_every=16)
True
>>> reached(0.95, 0.95, ">="), reached(0.95, 0.95, ">")
(True, False)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Literal

from evolve_envs.reward.protocol.critic_math import (
    NEGATIVE_RULES,
    NegativeRule,
    accumulate,
    accumulate_all,
    clamp_critic,
    clamp_progress,
    critic_between,
)

__all__ = [
    "NEGATIVE_RULES",
    "COMPARISONS",
    "NegativeRule",
    "Comparison",
    "clamp_progress",
    "clamp_critic",
    "accumulate",
    "accumulate_all",
    "critic_between",
    "is_check_step",
    "check_steps",
    "is_milestone",
    "reached",
    "as_fraction",
    "dense_rewards",
]

Comparison = Literal[">=", ">"]

COMPARISONS: tuple[str, ...] = (">=", ">")


def _check_schedule_args(start_step: int, call_every: int) -> None:
    if start_step < 0:
        raise ValueError(f"start_step must be >= 0, got {start_step}")
    if call_every < 1:
        raise ValueError(f"call_every must be >= 1, got {call_every}")


def is_check_step(step: int, *, start_step: int, call_every: int) -> bool:
    """True when the reward model is asked at episode step ``step`` (1 = after the first action)."""
    _check_schedule_args(start_step, call_every)
    if step < 1 or step < start_step:
        return False
    return (step - start_step) % call_every == 0


def check_steps(max_steps: int, *, start_step: int, call_every: int) -> Iterator[int]:
    """All check steps in ``1 … max_steps`` (inclusive), in order."""
    _check_schedule_args(start_step, call_every)
    first = max(start_step, 1)
    if first != start_step:  # start_step == 0: first check on the grid after step 0
        first = start_step + call_every * math.ceil((1 - start_step) / call_every)
    return iter(range(first, max_steps + 1, call_every))


def is_milestone(step: int, last_milestone_step: int, milestone_every: int) -> bool:
    """True when a check at ``step`` commits a new milestone."""
    if milestone_every <= 0:
        return False
    return step - last_milestone_step >= milestone_every


def reached(value: float, threshold: float, comparison: Comparison = ">=") -> bool:
    """``value >= threshold`` or ``value > threshold``, chosen explicitly by ``comparison``."""
    if comparison == ">=":
        return value >= threshold
    if comparison == ">":
        return value > threshold
    raise ValueError(f"comparison must be one of {COMPARISONS}, got {comparison!r}")


def as_fraction(progress: float) -> float:
    """Progress (percent) as a fraction, rounded to 9 decimals so that float noise of the
    accumulation (95.00000000000001) cannot flip a threshold comparison.

    >>> as_fraction(95.00000000000001), reached(as_fraction(95.00000000000001), 0.95, ">")
    (0.95, False)
    """
    return round(progress / 100.0, 9)


def dense_rewards(values: Iterable[float], start: float = 0.0) -> list[float]:
    """Per-check dense rewards ``Δv/100`` for a sequence of progress values."""
    out: list[float] = []
    prev = float(start)
    for v in values:
        out.append((float(v) - prev) / 100.0)
        prev = float(v)
    return out
