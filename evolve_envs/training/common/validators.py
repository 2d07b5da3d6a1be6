"""Action validators: which sampled actions are invalid, and a differentiable probability of
invalidity for the loss's penalty (exact for Gaussian policies; docs/DISTRL.md).

Example:
    >>> import numpy as np, torch
    >>> from gymnasium import spaces
    >>> box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    >>> a = torch.tensor([[0.0, 0.5], [1.5, 0.0], [float("nan"), 0.0]])
    >>> out_of_bounds_or_nonfinite(a, box).tolist()
    [0.0, 1.0, 1.0]
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch
from gymnasium import spaces
from torch.distributions import Distribution, Independent, Normal

__all__ = [
    "ActionValidator",
    "box_bounds",
    "default_validator",
    "gaussian_mass_outside",
    "out_of_bounds_or_nonfinite",
]


@runtime_checkable
class ActionValidator(Protocol):
    """``validator(raw_actions [N, A], space) -> [N]`` float in ``[0, 1]`` (1 = invalid)."""

    def __call__(self, raw_actions: torch.Tensor, space: spaces.Box) -> torch.Tensor: ...


def box_bounds(
    space: spaces.Box,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | None = None,
    width: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low, high)`` of a ``Box`` as flat tensors, repeated to ``width`` (a policy that emits a
    chunk of actions per step is checked against the per-step box)."""
    if not isinstance(space, spaces.Box):
        raise ValueError(f"expected a gymnasium Box action space, got {space!r}")
    low = torch.as_tensor(np.asarray(space.low, dtype=np.float64).reshape(-1), dtype=dtype)
    high = torch.as_tensor(np.asarray(space.high, dtype=np.float64).reshape(-1), dtype=dtype)
    if width is not None and width != low.numel():
        if width % low.numel():
            raise ValueError(
                f"actions have {width} components, not a multiple of the action space's "
                f"{low.numel()}"
            )
        reps = width // low.numel()
        low, high = low.repeat(reps), high.repeat(reps)
    return low.to(device), high.to(device)


def out_of_bounds_or_nonfinite(raw_actions: torch.Tensor, space: spaces.Box) -> torch.Tensor:
    """1.0 where any component is outside ``[low, high]`` or not finite, else 0.0."""
    a = torch.as_tensor(raw_actions)
    a = a.reshape(a.shape[0], -1)
    low, high = box_bounds(
        space,
        dtype=a.dtype if a.is_floating_point() else torch.float32,
        device=a.device,
        width=a.shape[1],
    )
    bad = ~torch.isfinite(a) | (a < low) | (a > high)
    return bad.any(dim=-1).to(torch.float32)


def default_validator(action_space: spaces.Box | None = None) -> ActionValidator:
    """The validator used when none is configured: :func:`out_of_bounds_or_nonfinite`."""
    if action_space is not None and not isinstance(action_space, spaces.Box):
        raise ValueError(
            f"the default action validator needs a Box action space, got {action_space}"
        )
    return out_of_bounds_or_nonfinite


def gaussian_mass_outside(dist: Distribution, space: spaces.Box) -> torch.Tensor:
    """Probability ``[B]`` that an action from a diagonal Gaussian lies outside the box,
    differentiable in ``mu`` and ``sigma`` (infinite bounds add no mass)."""
    base = dist.base_dist if isinstance(dist, Independent) else dist
    if not isinstance(base, Normal):
        raise TypeError(f"gaussian_mass_outside needs a Normal distribution, got {type(base)}")
    mu, sigma = base.loc, base.scale
    mu = mu.reshape(mu.shape[0], -1)
    sigma = sigma.expand_as(base.loc).reshape(mu.shape)
    low, high = box_bounds(space, dtype=mu.dtype, device=mu.device, width=mu.shape[1])
    std_normal = Normal(torch.zeros((), dtype=mu.dtype), torch.ones((), dtype=mu.dtype))
    below = torch.where(
        torch.isfinite(low), std_normal.cdf((low - mu) / sigma), torch.zeros_like(mu)
    )
    above = torch.where(
        torch.isfinite(high), 1.0 - std_normal.cdf((high - mu) / sigma), torch.zeros_like(mu)
    )
    inside = (1.0 - below - above).clamp(min=0.0, max=1.0)
    return 1.0 - inside.prod(dim=-1)
