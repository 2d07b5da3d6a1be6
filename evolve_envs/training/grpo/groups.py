"""GRPO's groups: ``group_size`` consecutive envs share an initial state (the same reset seed or
init-state id), as RLinf's ``LiberoEnv`` repeats each reset-state id ``group_size`` times.

Example:
    >>> s = group_seeds(4, 2, rng=0)
    >>> s[0] == s[1] and s[2] == s[3] and s[0] != s[2]
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evolve_envs.training.common.arrays import Array, to_numpy

__all__ = ["check_group_size", "group_init_ids", "group_seeds", "stack_steps"]


def check_group_size(batch: int, group_size: int) -> None:
    """Raise unless ``group_size`` (>= 2) divides the batch."""
    if not isinstance(group_size, (int, np.integer)) or isinstance(group_size, bool):
        raise TypeError(f"group_size must be an int, got {type(group_size).__name__}")
    if group_size < 2:
        raise ValueError(
            f"group_size must be >= 2 for GRPO (the group standard deviation needs two "
            f"episodes), got {group_size}"
        )
    if batch % group_size != 0:
        raise ValueError(f"batch size {batch} is not divisible by group_size {group_size}")


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
    check_group_size(num_envs, group_size)
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
    """
    check_group_size(num_envs, group_size)
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    n_groups = num_envs // group_size
    seeds = gen.choice(2**31 - 1, size=n_groups, replace=False)
    return [int(s) for s in np.repeat(seeds, group_size)]


def stack_steps(steps: Sequence[Array]) -> np.ndarray:
    """Stack per-step vector-env arrays (``[B]`` each) into a time-major ``[T, B]`` array."""
    return np.stack([to_numpy(s, name="step") for s in steps], axis=0)
