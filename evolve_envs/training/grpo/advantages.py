"""GRPO group advantages, computed the way RLinf computes them for embodied tasks: each
episode's undiscounted score up to its first ``done``, normalised within its group of
``group_size`` consecutive envs, ``A = (score - mean) / (std + 1e-6)`` (unbiased std), given to
every step up to that ``done``. Inputs are NumPy arrays or torch tensors; outputs have the
input's kind. The layouts and the reward design they imply are described in docs/rlinf.md.

Example:
    >>> import numpy as np
    >>> res = grpo_advantages(np.array([[0.0, 1.0], [1.0, 0.0]]),
    ...                       np.array([[False, False], [True, True]]), group_size=2,
    ...                       layout="time_major")
    >>> res.scores.tolist()
    [1.0, 1.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from evolve_envs.training.common.arrays import Array, like, to_numpy, torch_of
from evolve_envs.training.grpo.groups import check_group_size

__all__ = [
    "GRPO_EPS",
    "GrpoAdvantages",
    "episode_scores",
    "first_done_mask",
    "group_normalize",
    "grpo_advantages",
    "reward_filter_mask",
    "rlinf_grpo_advantages",
]

GRPO_EPS = 1e-6
"""Added to the group standard deviation (RLinf's value)."""

RewardType = Literal["action_level", "chunk_level"]
Layout = Literal["time_major", "batch_major"]
LAYOUTS: tuple[str, ...] = ("time_major", "batch_major")


@dataclass(frozen=True)
class GrpoAdvantages:
    """Advantages and loss mask in the call's layout (``advantages`` is ``group_advantages``
    broadcast over the steps, times ``loss_mask``); ``scores`` and ``group_advantages`` are ``[B]``.
    """

    advantages: Array
    loss_mask: Array
    scores: Array
    group_advantages: Array


def _check_time_major(rewards: np.ndarray, dones: np.ndarray) -> None:
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [T, B], got shape {rewards.shape}")
    if dones.shape != rewards.shape:
        raise ValueError(f"dones must have the shape of rewards {rewards.shape}, got {dones.shape}")


# --------------------------------------------------------------------------- core (NumPy)


def _first_done_mask_np(dones: np.ndarray, done_before: np.ndarray | None) -> np.ndarray:
    """True for steps up to and including the first done (time-major ``[T, B]``)."""
    done_before_step = np.cumsum(dones, axis=0) - dones  # dones strictly before step t
    mask = done_before_step == 0
    if done_before is not None:
        mask &= ~done_before[None, :]
    return mask


def _episode_scores_np(rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
    mask = _first_done_mask_np(dones, None)
    return np.where(mask, rewards, 0.0).sum(axis=0)


def _group_normalize_np(scores: np.ndarray, group_size: int, eps: float) -> np.ndarray:
    check_group_size(scores.shape[0], group_size)
    grouped = scores.reshape(-1, group_size)
    mean = grouped.mean(axis=1, keepdims=True)
    std = grouped.std(axis=1, ddof=1, keepdims=True)
    adv = (grouped - mean) / (std + eps)
    # A group of identical scores gets exactly 0 (the float mean may differ from the scores by
    # an ulp, which eps would otherwise turn into ~1e-10).
    flat = grouped.max(axis=1) == grouped.min(axis=1)
    adv[flat] = 0.0
    return adv.reshape(-1)


# --------------------------------------------------------------------------- public API


def first_done_mask(dones: Array) -> Array:
    """Loss mask for time-major ``dones[T, B]``: True up to and including each env's first done."""
    torch_mod = torch_of(dones)
    d = to_numpy(dones, bool, name="dones")
    if d.ndim != 2:
        raise ValueError(f"dones must be [T, B], got shape {d.shape}")
    return like(_first_done_mask_np(d, None), dones, torch_mod, is_bool=True)


def episode_scores(rewards: Array, dones: Array) -> Array:
    """Undiscounted reward sum of each env's first episode, ``[T, B]`` -> ``[B]`` (an env that
    never finishes scores all its rewards, as in RLinf)."""
    torch_mod = torch_of(rewards, dones)
    r = to_numpy(rewards, np.float64, name="rewards")
    d = to_numpy(dones, bool, name="dones")
    _check_time_major(r, d)
    return like(_episode_scores_np(r, d), rewards, torch_mod)


def group_normalize(scores: Array, group_size: int, eps: float = GRPO_EPS) -> Array:
    """``(score - group mean) / (unbiased group std + eps)`` within consecutive groups of
    ``group_size``; a group of equal scores gets 0."""
    torch_mod = torch_of(scores)
    s = to_numpy(scores, np.float64, name="scores")
    if s.ndim != 1:
        raise ValueError(f"scores must be [B], got shape {s.shape}")
    return like(_group_normalize_np(s, group_size, eps), scores, torch_mod)


def grpo_advantages(
    rewards: Array,
    dones: Array,
    group_size: int,
    *,
    layout: Layout,
    eps: float = GRPO_EPS,
    mask_after_first_done: bool = True,
) -> GrpoAdvantages:
    """GRPO advantages for rewards of a Gymnasium vector env, in a named layout (``[T, B]`` and
    ``[B, T]`` look alike): ``"time_major"`` (``rewards[t]`` is the vector env's reward at step
    ``t``) or ``"batch_major"`` (one row per episode); ``dones`` is ``terminated | truncated``, and
    ``group_size`` consecutive envs share an initial state. With ``mask_after_first_done=False``
    every step keeps the advantage (as RLinf does under ``auto_reset``, ``ignore_terminations``)."""
    if layout not in LAYOUTS:
        raise ValueError(
            f"layout must be 'time_major' ([T, B]) or 'batch_major' ([B, T]), got {layout!r}"
        )
    torch_mod = torch_of(rewards, dones)
    r = to_numpy(rewards, np.float64, name="rewards")
    d = to_numpy(dones, bool, name="dones")
    if layout == "batch_major":
        if r.ndim != 2:
            raise ValueError(f"rewards must be [B, T], got shape {r.shape}")
        res = grpo_advantages(
            r.T,
            d.T,
            group_size,
            layout="time_major",
            eps=eps,
            mask_after_first_done=mask_after_first_done,
        )
        return GrpoAdvantages(
            advantages=like(np.ascontiguousarray(res.advantages.T), rewards, torch_mod),
            loss_mask=like(np.ascontiguousarray(res.loss_mask.T), dones, torch_mod, is_bool=True),
            scores=like(res.scores, rewards, torch_mod),
            group_advantages=like(res.group_advantages, rewards, torch_mod),
        )
    _check_time_major(r, d)
    scores = _episode_scores_np(r, d)
    adv_b = _group_normalize_np(scores, group_size, eps)
    mask = _first_done_mask_np(d, None) if mask_after_first_done else np.ones_like(d)
    adv = np.where(mask, adv_b[None, :], 0.0)
    return GrpoAdvantages(
        advantages=like(adv, rewards, torch_mod),
        loss_mask=like(mask, dones, torch_mod, is_bool=True),
        scores=like(scores, rewards, torch_mod),
        group_advantages=like(adv_b, rewards, torch_mod),
    )


def _flatten_rlinf(
    rewards: np.ndarray, dones: np.ndarray, reward_type: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """RLinf layout -> time-major ``rewards[T, B]``, ``dones_after[T, B]``, ``done_before[B]``."""
    if reward_type not in ("action_level", "chunk_level"):
        raise ValueError(
            f"reward_type must be 'action_level' or 'chunk_level', got {reward_type!r}"
        )
    if rewards.ndim != 3:
        raise ValueError(f"rewards must be [n_chunks, B, C], got shape {rewards.shape}")
    n_chunks, batch, chunk = rewards.shape
    if dones.shape != (n_chunks + 1, batch, chunk):
        raise ValueError(
            f"dones must be [n_chunks + 1, B, C] = {(n_chunks + 1, batch, chunk)} "
            f"(the first chunk holds the flags before the first step), got {dones.shape}"
        )
    # The flag before the first step is the bootstrap chunk's last action (RLinf flattens the
    # chunks and keeps the last n_steps + 1 flags).
    done_before = dones[0, :, -1]
    if reward_type == "chunk_level":
        rewards = rewards.sum(axis=-1, keepdims=True)
        dones = dones.any(axis=-1, keepdims=True)
        chunk = 1
    n_steps = n_chunks * chunk
    flat_r = rewards.transpose(0, 2, 1).reshape(n_steps, batch)
    flat_d = dones.transpose(0, 2, 1).reshape((n_chunks + 1) * chunk, batch)[-(n_steps + 1) :]
    return flat_r, flat_d[1:], done_before, chunk


def rlinf_grpo_advantages(
    rewards: Array,
    dones: Array,
    group_size: int,
    *,
    reward_type: RewardType = "action_level",
    eps: float = GRPO_EPS,
    mask_after_first_done: bool = True,
) -> GrpoAdvantages:
    """GRPO advantages in RLinf's embodied layout: ``rewards[n_chunks, B, C]`` and
    ``dones[n_chunks + 1, B, C]`` (chunk 0 holds the flags before the first step; one set already
    masks the whole rollout but does not cut the score). ``reward_type="chunk_level"`` sums
    rewards and ORs dones over each chunk (advantages ``[n_chunks, B, 1]``)."""
    torch_mod = torch_of(rewards, dones)
    r = to_numpy(rewards, np.float64, name="rewards")
    d = to_numpy(dones, bool, name="dones")
    flat_r, dones_after, done_before, chunk = _flatten_rlinf(r, d, reward_type)
    n_steps, batch = flat_r.shape
    scores = _episode_scores_np(flat_r, dones_after)
    adv_b = _group_normalize_np(scores, group_size, eps)
    if mask_after_first_done:
        mask = _first_done_mask_np(dones_after, done_before)
    else:
        mask = np.ones_like(dones_after)
    adv = np.where(mask, adv_b[None, :], 0.0)
    n_chunks = n_steps // chunk

    def unflatten(x: np.ndarray) -> np.ndarray:
        return x.reshape(n_chunks, chunk, batch).transpose(0, 2, 1)

    return GrpoAdvantages(
        advantages=like(unflatten(adv), rewards, torch_mod),
        loss_mask=like(unflatten(mask), dones, torch_mod, is_bool=True),
        scores=like(scores, rewards, torch_mod),
        group_advantages=like(adv_b, rewards, torch_mod),
    )


def reward_filter_mask(
    scores: Array, group_size: int, lower_bound: float, upper_bound: float
) -> Array:
    """RLinf's ``filter_rewards``: keep (True, bool ``[B]``) the groups whose mean episode score is
    in the bounds. RLinf's LIBERO bounds assume 0/1 successes times 5; dense progress sums to its
    final progress in [0, 1], so the shipped RLinf config uses (0.05, 0.9) (docs/rlinf.md).

    Example:
        >>> import numpy as np
        >>> reward_filter_mask(np.array([0.0, 0.0, 0.3, 0.9]), 2, 0.05, 0.9).tolist()
        [False, False, True, True]
    """
    torch_mod = torch_of(scores)
    s = to_numpy(scores, np.float64, name="scores")
    if s.ndim != 1:
        raise ValueError(f"scores must be [B], got shape {s.shape}")
    if lower_bound > upper_bound:
        raise ValueError(f"lower_bound {lower_bound} > upper_bound {upper_bound}")
    if s.shape[0] % group_size != 0 or group_size < 1:
        raise ValueError(f"batch size {s.shape[0]} is not divisible by group_size {group_size}")
    means = s.reshape(-1, group_size).mean(axis=1)
    keep = (means >= lower_bound) & (means <= upper_bound)
    return like(np.repeat(keep, group_size), scores, torch_mod, is_bool=True)
