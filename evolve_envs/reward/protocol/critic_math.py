"""Progress arithmetic shared by the reward wrappers, the service and its mock backend.

* A *critic* ``c ∈ [-100, 100]`` says how much closer a later frame is to completion than an
  earlier one; *progress* ``v ∈ [0, 100]``.
* ``"vlac"`` rule (VLAC ``critic_to_value_simple``, EVOLVE-VLA eq. 2): ``v ← v + (100 − v)·c/100``
  for every ``c``; unbounded below in the original, so :func:`accumulate` clamps to ``[0, 100]``.
* ``"robodopamine"`` rule: the same for ``c ≥ 0``; for ``c < 0`` the loss scales with the progress
  achieved so far, ``v ← v + v·c/100`` (never below 0).
* :func:`value_list` is VLAC's own unclamped accumulation from 0, the ``value_list`` of a
  ``/trajectory-critic`` answer; :func:`critic_between` inverts the accumulation (the mock
  backend's critic); :func:`reference_indices` is VLAC's choice of reference frames.

Example:
    >>> accumulate(0.0, 40.0), accumulate(40.0, 50.0)
    (40.0, 70.0)
    >>> value_list([40.0, 50.0])
    [0.0, 40.0, 70.0]
    >>> critic_between(40.0, 70.0)
    50.0
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
    """One accumulation step: the progress after a frame judged ``critic`` relative to ``value``.

    ``rule="vlac"``: ``v + (100 − v)·c/100``; ``rule="robodopamine"``: that for ``c ≥ 0`` and
    ``v + v·c/100`` for ``c < 0``. Inputs are clamped (``v`` to ``[0, 100]``, ``c`` to
    ``[-100, 100]``) and so is the result.
    """
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
    """The critic that :func:`accumulate` (``"vlac"`` rule) maps from ``value_a`` to ``value_b``.

    ``100·(b − a)/(100 − a)``, clamped to ``[-100, 100]`` (so exact only for ``b >= 2a − 100``);
    0 when ``a == 100 == b``. Useful for
    building reference sequences in tests and for converting absolute progress into critics.
    """
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
    """VLAC's reference sampling: which of ``count`` reference frames to keep for ``ref_num``.

    The first frame and ``ref_num − 1`` others evenly spaced up to the last
    (``int(i·(count − 1)/(ref_num − 1))``); all frames when ``ref_num`` is None or at least
    ``count``; only the first when ``ref_num`` is 1 or less.

    >>> reference_indices(10, 4)
    [0, 3, 6, 9]
    >>> reference_indices(5, 3)
    [0, 2, 4]
    >>> reference_indices(3, None), reference_indices(3, 7), reference_indices(3, 1)
    ([0, 1, 2], [0, 1, 2], [0])
    >>> reference_indices(0, 1)
    []
    """
    if ref_num is not None and ref_num <= 1:
        return list(range(min(count, 1)))
    if ref_num is None or ref_num >= count:
        return list(range(count))
    delta = (count - 1) / (ref_num - 1)
    return [int(i * delta) for i in range(ref_num)]
