"""The training objective of a progress model (docs/fit-reward.md): on a success's frames the
squared error to its label, a done frame (label 1) weighing ``DONE_WEIGHT`` frames; on a
failure's frames (no label) a penalty above the failure cap only.

Example:
    >>> import torch
    >>> pred, label = torch.tensor([0.5, 0.9]), np.array([1.0, np.nan], np.float32)
    >>> target, is_success, weight = frame_targets(label, "cpu")
    >>> round(float(progress_loss(pred, target, is_success, weight, failure_cap=0.8)), 4)
    0.26
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["DONE_WEIGHT", "frame_targets", "progress_loss"]

#: a done frame (the last of a success) weighs this many ordinary frames: one frame per episode
#: carries the done decision, which must stand apart from the near misses before it
DONE_WEIGHT = 5.0


def frame_targets(
    labels: np.ndarray, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(target, is_success, weight)`` per frame for its label (NaN: a failure's frame, no
    target), as tensors on ``device``."""
    import torch

    ok = ~np.isnan(labels)
    target = torch.as_tensor(np.nan_to_num(labels), device=device)
    is_success = torch.as_tensor(ok, device=device)
    weight = torch.as_tensor(
        np.where(labels == 1.0, DONE_WEIGHT, 1.0), device=device, dtype=torch.float32
    )
    return target, is_success, weight


def progress_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    is_success: torch.Tensor,
    weight: torch.Tensor,
    failure_cap: float,
) -> torch.Tensor:
    """The loss of a batch's predicted progress ``pred`` (in [0, 1]): the weighted mean squared
    error on the frames of successes plus the mean squared excess above ``failure_cap`` on the
    frames of failures."""
    import torch

    terms = []
    if is_success.any():
        err = weight[is_success] * (pred[is_success] - target[is_success]) ** 2
        terms.append(err.sum() / weight[is_success].sum())
    if (~is_success).any():
        terms.append((torch.relu(pred[~is_success] - failure_cap) ** 2).mean())
    return torch.stack(terms).sum()
