"""GRPO group advantages, computed the way RLinf computes them for embodied tasks.

GRPO needs no critic: each episode gets one *score*, the undiscounted sum of its rewards up to
and including its first ``done``; the score is normalised within its group of ``group_size``
episodes that started from the same initial state,

    A = (score - mean(group)) / (std(group) + eps),      eps = 1e-6,

with the *unbiased* standard deviation (Bessel's correction, ``torch.Tensor.std``'s default, which
is what RLinf uses). Every step of the episode up to and including the first ``done`` carries that
advantage; steps after it are masked out of the loss (``loss_mask`` is False and the advantage 0).

Two consequences for reward design: only the per-episode reward *sum* matters to GRPO (how the
reward is spread over the steps does not), and a group whose episodes all score the same gets
advantage 0 everywhere (it teaches nothing).

Layouts:

* **time-major** (plain Gymnasium vector envs): ``rewards[T, B]`` and ``dones[T, B]``, where
  ``dones[t, b]`` says that env ``b``'s episode ended *at* step ``t`` (terminated or truncated).
  See :func:`grpo_advantages`.
* **RLinf's** embodied layout: ``rewards[n_chunks, B, C]`` and ``dones[n_chunks + 1, B, C]``, the
  first chunk of ``dones`` being the flags before the rollout's first step, with ``reward_type``
  ``"action_level"`` (one advantage per action) or ``"chunk_level"`` (one per action chunk; rewards
  summed and dones OR-ed over the chunk). See :func:`rlinf_grpo_advantages`.

Batch index ``b`` belongs to group ``b // group_size``: ``group_size`` *consecutive* envs share an
initial state (RLinf's ``LiberoEnv`` repeats each reset-state id ``group_size`` times;
:func:`group_init_ids` and :func:`group_seeds` produce the same for Gymnasium vector envs).

Inputs may be NumPy arrays or torch tensors (torch is optional); outputs have the input's kind
(torch outputs keep the rewards' dtype and device; NumPy float outputs are float64).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

import numpy as np

from evolve_envs.train.arrays import like, to_numpy, torch_of

if TYPE_CHECKING:
    import torch

#: A NumPy array or a torch tensor (results come back as the input's kind).
Array: TypeAlias = "np.ndarray | torch.Tensor"

__all__ = [
    "GRPO_EPS",
    "GrpoAdvantages",
    "episode_scores",
    "first_done_mask",
    "group_init_ids",
    "group_normalize",
    "group_seeds",
    "grpo_advantages",
    "reward_filter_mask",
    "rlinf_grpo_advantages",
    "stack_steps",
]

GRPO_EPS = 1e-6
"""Added to the group standard deviation (RLinf's value)."""

RewardType = Literal["action_level", "chunk_level"]
Layout = Literal["time_major", "batch_major"]
LAYOUTS: tuple[str, ...] = ("time_major", "batch_major")


@dataclass(frozen=True)
class GrpoAdvantages:
    """Result of a GRPO advantage computation.

    ``advantages`` and ``loss_mask`` have the layout of the call (time-major ``[T, B]``, or RLinf's
    ``[n_chunks, B, C]`` / ``[n_chunks, B, 1]``); ``scores`` and ``group_advantages`` are ``[B]``.
    ``advantages`` is ``group_advantages`` broadcast over the steps and multiplied by
    ``loss_mask``.

    Example:
        >>> import numpy as np
        >>> res = grpo_advantages(np.array([[0.0, 1.0], [1.0, 0.0]]),
        ...                       np.array([[False, False], [True, True]]), group_size=2,
        ...                       layout="time_major")
        >>> res.scores.tolist()
        [1.0, 1.0]
    """

    advantages: Array
    loss_mask: Array
    scores: Array
    group_advantages: Array


def _check_group_size(batch: int, group_size: int) -> None:
    if not isinstance(group_size, (int, np.integer)) or isinstance(group_size, bool):
        raise TypeError(f"group_size must be an int, got {type(group_size).__name__}")
    if group_size < 2:
        raise ValueError(
            f"group_size must be >= 2 for GRPO (the group standard deviation needs two "
            f"episodes), got {group_size}"
        )
    if batch % group_size != 0:
        raise ValueError(f"batch size {batch} is not divisible by group_size {group_size}")


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
    _check_group_size(scores.shape[0], group_size)
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
    """Loss mask for time-major ``dones[T, B]``: True up to and including each env's first done.

    Example:
        >>> import numpy as np
        >>> first_done_mask(np.array([[False], [True], [False]]))[:, 0].tolist()
        [True, True, False]
    """
    torch_mod = torch_of(dones)
    d = to_numpy(dones, bool, name="dones")
    if d.ndim != 2:
        raise ValueError(f"dones must be [T, B], got shape {d.shape}")
    return like(_first_done_mask_np(d, None), dones, torch_mod, is_bool=True)


def episode_scores(rewards: Array, dones: Array) -> Array:
    """Undiscounted reward sum of each env's first episode: ``[T, B]`` -> ``[B]``.

    Rewards after the first done are ignored; an env that never finishes scores the sum of all
    its rewards (as in RLinf).

    Example:
        >>> import numpy as np
        >>> episode_scores(np.array([[1.0], [2.0], [4.0]]),
        ...                np.array([[False], [True], [False]])).tolist()
        [3.0]
    """
    torch_mod = torch_of(rewards, dones)
    r = to_numpy(rewards, np.float64, name="rewards")
    d = to_numpy(dones, bool, name="dones")
    _check_time_major(r, d)
    return like(_episode_scores_np(r, d), rewards, torch_mod)


def group_normalize(scores: Array, group_size: int, eps: float = GRPO_EPS) -> Array:
    """GRPO normalisation of ``scores[B]`` within consecutive groups of ``group_size``.

    ``(score - group mean) / (unbiased group std + eps)``. A group whose scores are all equal
    gets 0.

    Example:
        >>> import numpy as np
        >>> group_normalize(np.array([1.0, 1.0, 0.0, 2.0]), 2).round(4).tolist()
        [0.0, 0.0, -0.7071, 0.7071]
    """
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
    """GRPO advantages for rewards collected from a Gymnasium vector env.

    A ``[T, B]`` array and a ``[B, T]`` array look alike, so the layout is always named: a
    batch-major array read as time-major would silently score the wrong axis.

    Args:
        rewards: ``[T, B]`` rewards with ``layout="time_major"`` (as collected: ``rewards[t]`` is
            the vector env's reward array at step ``t``, see :func:`stack_steps`), or ``[B, T]``
            with ``layout="batch_major"`` (one row per episode).
        dones: bool, ``terminated | truncated`` at each step, in the layout of ``rewards``.
        group_size: envs ``g*group_size ... (g+1)*group_size - 1`` form group ``g`` and must have
            started from the same initial state (see :func:`group_seeds`).
        layout: ``"time_major"`` or ``"batch_major"``; ``advantages`` and ``loss_mask`` come back
            in the same layout, ``scores`` is ``[B]`` either way.
        eps: added to the group standard deviation.
        mask_after_first_done: when False every step keeps the advantage (RLinf does this when
            ``auto_reset`` or ``ignore_terminations`` is on); scores still stop at the first done.

    Returns:
        :class:`GrpoAdvantages` with ``advantages[T, B]``, ``loss_mask[T, B]``, ``scores[B]``.

    Example:
        >>> import numpy as np
        >>> rewards = np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 0.0]])
        >>> dones = np.array([[False, False], [True, False], [False, True]])
        >>> res = grpo_advantages(rewards, dones, group_size=2, layout="time_major")
        >>> res.scores.tolist(), res.loss_mask[:, 0].tolist()
        ([1.0, 0.0], [True, True, False])
        >>> grpo_advantages(rewards.T, dones.T, 2, layout="batch_major").scores.tolist()
        [1.0, 0.0]
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'time_major' ([T, B]) or 'batch_major' ([B, T]), "
                         f"got {layout!r}")  # fmt: skip
    torch_mod = torch_of(rewards, dones)
    r = to_numpy(rewards, np.float64, name="rewards")
    d = to_numpy(dones, bool, name="dones")
    if layout == "batch_major":
        if r.ndim != 2:
            raise ValueError(f"rewards must be [B, T], got shape {r.shape}")
        res = grpo_advantages(r.T, d.T, group_size, layout="time_major", eps=eps,
                              mask_after_first_done=mask_after_first_done)  # fmt: skip
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
    """GRPO advantages in RLinf's embodied layout (``algorithm.adv_type: grpo``).

    Args:
        rewards: ``[n_chunks, B, C]`` per-action rewards of one rollout epoch (``C`` = actions per
            chunk, ``num_action_chunks`` in RLinf).
        dones: ``[n_chunks + 1, B, C]`` bool; chunk 0 holds the flags *before* the first step
            (RLinf's bootstrap step), chunk ``k + 1`` the flags after chunk ``k``.
        group_size: ``algorithm.group_size``.
        reward_type: ``"action_level"`` (advantages ``[n_chunks, B, C]``) or ``"chunk_level"``
            (rewards summed and dones OR-ed over each chunk; advantages ``[n_chunks, B, 1]``).
        eps: added to the group standard deviation.
        mask_after_first_done: RLinf builds this mask only when neither ``auto_reset`` nor
            ``ignore_terminations`` is set; pass False to mirror those modes.

    A done flag already set before the first step masks the whole rollout (as RLinf's
    ``compute_loss_mask`` does) but does not cut the score.

    Example:
        >>> import numpy as np
        >>> rewards = np.zeros((2, 2, 2)); rewards[1, 0, 0] = 5.0
        >>> dones = np.zeros((3, 2, 2), dtype=bool); dones[2, 0, 0] = True
        >>> res = rlinf_grpo_advantages(rewards, dones, group_size=2)
        >>> res.advantages.shape, res.loss_mask[:, 0, :].tolist()
        ((2, 2, 2), [[True, True], [True, False]])
    """
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
    """RLinf's ``filter_rewards``: keep groups whose *mean* episode score is in the bounds.

    RLinf drops (masks out of the loss) every group whose mean masked reward sum lies outside
    ``[rewards_lower_bound, rewards_upper_bound]``. Its LIBERO defaults (0.5, 4.5) assume a 0/1
    success times ``reward_coef`` 5, i.e. they drop all-fail and all-success groups. With dense
    progress rewards an episode sums to its final progress in [0, 1] (times any reward weight):
    re-tune the bounds on that scale, e.g. (0.05, 0.9) -- the values of the shipped RLinf config
    and docs/rlinf.md -- to drop groups that made no progress or all reached the done threshold
    (0.95). Returns a bool ``[B]`` (True = kept).

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


# --------------------------------------------------------------------------- grouping helpers


def group_init_ids(
    num_envs: int,
    group_size: int,
    num_init_states: int,
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Initial-state ids for ``num_envs`` envs, shared by ``group_size`` consecutive envs.

    Draws ``num_envs // group_size`` distinct ids (with replacement only when there are more
    groups than states) from ``range(num_init_states)`` and repeats each ``group_size`` times.

    Example:
        >>> group_init_ids(6, 3, num_init_states=50, rng=0).reshape(2, 3)[:, 0].shape
        (2,)
    """
    _check_group_size(num_envs, group_size)
    if num_init_states < 1:
        raise ValueError(f"num_init_states must be >= 1, got {num_init_states}")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    n_groups = num_envs // group_size
    ids = gen.choice(num_init_states, size=n_groups, replace=n_groups > num_init_states)
    return np.repeat(ids.astype(np.int64), group_size)


def group_seeds(
    num_envs: int, group_size: int, rng: np.random.Generator | int | None = None
) -> list[int]:
    """Per-env reset seeds, equal within each group of ``group_size`` consecutive envs.

    For envs whose initial state is a function of the reset seed::

        obs, info = vec_env.reset(seed=group_seeds(vec_env.num_envs, group_size=8, rng=step))

    Example:
        >>> s = group_seeds(4, 2, rng=0)
        >>> s[0] == s[1] and s[2] == s[3] and s[0] != s[2]
        True
    """
    _check_group_size(num_envs, group_size)
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    n_groups = num_envs // group_size
    seeds = gen.choice(2**31 - 1, size=n_groups, replace=False)
    return [int(s) for s in np.repeat(seeds, group_size)]


def stack_steps(steps: Sequence[Array]) -> np.ndarray:
    """Stack per-step vector-env arrays (``[B]`` each) into a time-major ``[T, B]`` array."""
    return np.stack([to_numpy(s, name="step") for s in steps], axis=0)
