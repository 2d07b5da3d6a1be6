"""Non-finite numbers never reach the weights or a checkpoint: a step whose loss or gradient norm
is not finite is skipped, :data:`LIMIT` of them in a row stop the run, and a checkpoint whose
weights are not finite is refused.

Example:
    >>> import math
    >>> guard = FiniteSteps(limit=2)
    >>> guard.ok(0.5, 1.0), guard.ok(math.nan, 1.0), guard.skipped
    (True, False, 1)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["LIMIT", "FiniteSteps", "NonFiniteError", "nonfinite_tensors"]

#: Skipped (non-finite) optimizer steps in a row that stop the run.
LIMIT = 10


class NonFiniteError(RuntimeError):
    """The learner met only non-finite losses or gradients, or its weights are not finite."""


def _finite(value: float | torch.Tensor) -> bool:
    return math.isfinite(float(value))


class FiniteSteps:
    """Decides whether an optimizer step may be taken; counts and limits the skipped ones.

    Attributes:
        skipped: steps skipped since the run started (a column of the metrics).
        in_a_row: skipped steps since the last finite one.
    """

    def __init__(self, limit: int = LIMIT, who: str = "the learner") -> None:
        self.limit = int(limit)
        self.who = who
        self.skipped = 0
        self.in_a_row = 0

    def ok(self, loss: float | torch.Tensor, grad_norm: float | torch.Tensor) -> bool:
        """True when ``loss`` and ``grad_norm`` are finite (take the step); else count a skip,
        and raise :class:`NonFiniteError` at ``limit`` skips in a row."""
        if _finite(loss) and _finite(grad_norm):
            self.in_a_row = 0
            return True
        self.skipped += 1
        self.in_a_row += 1
        if self.in_a_row >= self.limit:
            raise NonFiniteError(
                f"{self.who} skipped {self.in_a_row} updates in a row: a non-finite loss or "
                f"gradient norm (last: loss {float(loss):.4g}, grad norm {float(grad_norm):.4g}). "
                "The weights are those of the last finite update; lower the learning rate or "
                "look for NaN/inf rewards, then --resume the run directory"
            )
        return False


def nonfinite_tensors(state: Mapping[str, object]) -> list[str]:
    """Names of the entries of a ``state_dict`` holding NaN or inf (floating-point ones only)."""
    bad = []
    for name, value in state.items():
        detach = getattr(value, "detach", None)
        arr = np.asarray(detach().cpu().float().numpy() if detach is not None else value)
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            bad.append(name)
    return bad
