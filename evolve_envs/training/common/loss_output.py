"""What a loss returns, shared by every algorithm's loss, and two small tensor helpers.

>>> import torch
>>> out = LossOutput(loss=torch.tensor(1.0), stats={"policy_loss": 1.0})
>>> out.priorities.shape
(0,)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from evolve_envs.training.policies.base import Policy

__all__ = ["LOG_RATIO_CLAMP", "LossOutput", "as_float_tensor", "policy_device"]

LOG_RATIO_CLAMP = 20.0
"""Log importance ratios are clamped to ``[-20, 20]`` before ``exp`` (no overflow)."""


@dataclass
class LossOutput:
    """A scalar loss to backpropagate, float statistics, and per-trajectory priorities."""

    loss: torch.Tensor
    stats: dict[str, float]
    priorities: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))


def policy_device(policy: Policy) -> torch.device:
    """The device of the policy's first parameter (CPU for a policy without parameters)."""
    for p in policy.parameters():
        return p.device
    return torch.device("cpu")


def as_float_tensor(x: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x`` as a float32 tensor on ``device``."""
    return torch.as_tensor(x, dtype=torch.float32, device=device)
