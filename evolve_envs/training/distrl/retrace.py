"""Retrace(λ) value targets for one trajectory (the recursion and its edge cases are in
docs/DISTRL.md, "Retrace(λ)"); :func:`retrace_targets` shows a call."""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

__all__ = ["retrace_targets", "td_errors"]

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)


def _check(rewards, values, rhos, dones) -> int:
    t = int(rewards.shape[0])
    for name, arr in (("rewards", rewards), ("values", values), ("rhos", rhos), ("dones", dones)):
        if arr.ndim != 1 or int(arr.shape[0]) != t:
            raise ValueError(
                f"retrace_targets: {name} must have shape ({t},), got {tuple(arr.shape)}"
            )
    return t


def retrace_targets(
    rewards: ArrayT,
    values: ArrayT,
    bootstrap_value: float | ArrayT,
    rhos: ArrayT,
    dones: ArrayT,
    gamma: float,
    lam: float,
) -> ArrayT:
    """Retrace(λ) targets ``V_ret(s_t)`` for ``t = 0 .. T-1`` from ``[T]`` rewards, values, ratios
    ``pi / mu`` and dones, and ``V(s_T)`` (ignored after a termination); NumPy in, float64 out, or
    tensors of ``values``' kind (no gradient).

    >>> import numpy as np
    >>> r = np.array([1.0, 0.0, 1.0]); v = np.zeros(3); rho = np.ones(3)
    >>> retrace_targets(r, v, 0.0, rho, np.zeros(3, bool), gamma=0.5, lam=1.0).tolist()
    [1.25, 0.5, 1.0]
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"retrace_targets: gamma must be in [0, 1], got {gamma}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"retrace_targets: lam must be in [0, 1], got {lam}")
    if isinstance(values, torch.Tensor):
        with torch.no_grad():
            out = retrace_targets(
                _np(rewards),
                _np(values),
                float(_np(bootstrap_value).reshape(())),
                _np(rhos),
                _np(dones).astype(bool),
                gamma,
                lam,
            )
        return torch.as_tensor(out, dtype=values.dtype, device=values.device)
    r = np.asarray(rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    rho = np.asarray(rhos, dtype=np.float64)
    d = np.asarray(dones).astype(bool)
    t_len = _check(r, v, rho, d)
    c = lam * np.minimum(1.0, rho)
    targets = np.empty(t_len, dtype=np.float64)
    next_value = float(np.asarray(bootstrap_value, dtype=np.float64).reshape(()))
    carry = 0.0  # V_ret(s_{t+1}) - V(s_{t+1}), zero past the end or a termination
    for t in range(t_len - 1, -1, -1):
        if d[t]:
            delta = r[t] - v[t]
            carry = 0.0
        else:
            delta = r[t] + gamma * next_value - v[t]
            carry = gamma * c[t + 1] * carry if t + 1 < t_len else 0.0
        targets[t] = v[t] + delta + carry
        carry = targets[t] - v[t]
        next_value = v[t]
    return targets


def td_errors(
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: float,
    dones: np.ndarray,
    gamma: float,
) -> np.ndarray:
    """One-step TD errors ``delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_t) - V(s_t)``.

    >>> import numpy as np
    >>> td_errors(np.ones(2), np.zeros(2), 4.0, np.array([False, False]), 0.5).tolist()
    [1.0, 3.0]
    """
    r = np.asarray(rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    d = np.asarray(dones).astype(bool)
    next_v = np.append(v[1:], float(bootstrap_value))
    return r + gamma * np.where(d, 0.0, next_v) - v


def _np(x: object) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)
