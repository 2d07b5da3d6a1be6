"""Circular replay buffer with prioritized sampling (DPER): items drawn with probability
``p_i^alpha / sum_j p_j^alpha`` and importance weights ``(N P(i))^-beta`` scaled to ``w <= 1``.

Example:
    >>> import numpy as np
    >>> buf = PrioritizedReplay(capacity=3, alpha=1.0, beta=0.4)
    >>> for name, p in [("a", 1.0), ("b", 1.0), ("c", 2.0), ("d", 4.0)]:
    ...     _ = buf.add(name, p)
    >>> len(buf), buf.items()
    (3, ['d', 'b', 'c'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

import numpy as np

from evolve_envs.training.distrl.sum_tree import SumTree

__all__ = ["PRIORITY_EPS", "PrioritizedReplay"]

T = TypeVar("T")

PRIORITY_EPS = 1e-6
"""Priorities below this (zero included) are raised to it, so every item stays sampleable."""


class PrioritizedReplay(Generic[T]):
    """Circular buffer of items sampled in proportion to ``priority ** alpha``; when full,
    :meth:`add` overwrites the oldest. Indices are slots ``0 .. capacity-1``, and
    :meth:`generations` tells whether a slot was overwritten since it was sampled."""

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        *,
        uniform: bool = False,
        eps: float = PRIORITY_EPS,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"PrioritizedReplay capacity must be >= 1, got {capacity}")
        if not (np.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"PrioritizedReplay alpha must be >= 0, got {alpha}")
        if not eps > 0:
            raise ValueError(f"PrioritizedReplay eps must be > 0, got {eps}")
        self.capacity = int(capacity)
        self.alpha = float(alpha)
        self.uniform = bool(uniform) or self.alpha == 0.0
        self.eps = float(eps)
        self._beta = 0.0
        self.beta = beta
        self.beta0 = float(beta)
        self._tree = SumTree(self.capacity)
        self._items: list[T | None] = [None] * self.capacity
        self._priorities = np.zeros(self.capacity, dtype=np.float64)
        self._generation = np.full(self.capacity, -1, dtype=np.int64)
        self._live = np.zeros(self.capacity, dtype=bool)
        self._cursor = 0
        self._size = 0
        self.total_added = 0
        self.total_retired = 0
        self.total_sampled = 0
        self.total_updates = 0

    # ---- configuration -------------------------------------------------------------------
    @property
    def beta(self) -> float:
        """Importance-sampling exponent in ``[0, 1]``."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        if not (np.isfinite(value) and 0.0 <= value <= 1.0):
            raise ValueError(f"PrioritizedReplay beta must be in [0, 1], got {value}")
        self._beta = float(value)

    def anneal_beta(self, fraction: float) -> float:
        """Set ``beta`` linearly from its initial value (fraction 0) to 1 (fraction >= 1)."""
        f = min(max(float(fraction), 0.0), 1.0)
        self.beta = self.beta0 + (1.0 - self.beta0) * f
        return self.beta

    # ---- contents ------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._size

    @property
    def cursor(self) -> int:
        """Slot the next :meth:`add` writes."""
        return self._cursor

    @property
    def live(self) -> int:
        """Items that can be sampled (stored and not retired)."""
        return int(self._live[: self._size].sum())

    def is_live(self, indices: np.ndarray | Sequence[int]) -> np.ndarray:
        """Whether the slots ``indices`` hold an item that can be sampled."""
        return self._live[np.asarray(indices, dtype=np.int64)].copy()

    def retire(self, indices: np.ndarray | Sequence[int]) -> int:
        """Never sample the items in ``indices`` again (too stale); their slots are reused oldest
        first. Returns how many were live."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self._size):
            raise IndexError(f"PrioritizedReplay.retire: index out of range [0, {self._size})")
        idx = np.unique(idx)
        was = int(self._live[idx].sum())
        self._live[idx] = False
        self._tree.update(idx, np.zeros(idx.size))
        self.total_retired += was
        return was

    def priorities(self) -> np.ndarray:
        """Copy of the priorities of slots ``0 .. len-1`` (after the epsilon floor)."""
        return self._priorities[: self._size].copy()

    @property
    def max_priority(self) -> float:
        """Largest stored priority (1.0 when empty): a common choice for new items."""
        return float(self._priorities[: self._size].max()) if self._size else 1.0

    def items(self) -> list[T]:
        """Items in slot order ``0 .. len-1`` (slot ``i`` is index ``i``)."""
        return list(self._items[: self._size])  # type: ignore[arg-type]

    def stored(self) -> tuple[list[int], list[T]]:
        """``(indices, items)`` of everything stored, for a whole-buffer priority refresh."""
        return list(range(self._size)), self.items()

    def generations(self, indices: np.ndarray | Sequence[int]) -> np.ndarray:
        """Insertion counter of the items now in ``indices`` (changes when a slot is reused)."""
        return self._generation[np.asarray(indices, dtype=np.int64)].copy()

    def _checked(self, priorities: np.ndarray | Sequence[float] | float) -> np.ndarray:
        p = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(p)):
            raise ValueError(
                f"PrioritizedReplay: priorities must be finite, got {p[~np.isfinite(p)][:5]}"
            )
        if np.any(p < 0):
            raise ValueError(f"PrioritizedReplay: priorities must be >= 0, got {p[p < 0][:5]}")
        return np.maximum(p, self.eps)

    def _tree_values(self, p: np.ndarray) -> np.ndarray:
        return np.ones_like(p) if self.uniform else p**self.alpha

    def add(self, item: T, priority: float) -> int:
        """Store ``item`` with ``priority``; return its slot (the oldest item is overwritten)."""
        p = self._checked(priority)
        if p.size != 1:
            raise ValueError("PrioritizedReplay.add: one priority per item")
        idx = self._cursor
        self._items[idx] = item
        self._priorities[idx] = p[0]
        self._generation[idx] = self.total_added
        self._live[idx] = True
        self._tree.update([idx], self._tree_values(p))
        self._cursor = (idx + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)
        self.total_added += 1
        return idx

    def sample(
        self, batch_size: int, rng: np.random.Generator, *, stratified: bool = False
    ) -> tuple[list[T], np.ndarray, np.ndarray]:
        """Draw ``batch_size`` items with replacement, ``P(i) ∝ p_i^alpha``.

        Returns ``(items, indices, is_weights)``: ``indices`` int64 ``[B]``, ``is_weights``
        float32 ``[B]`` in ``(0, 1]``. With ``stratified`` the prefix sums are drawn one per
        equal-mass stratum (lower variance, same expected counts).
        """
        if self._size == 0 or self.live == 0:
            raise ValueError("PrioritizedReplay.sample: the buffer is empty")
        if batch_size < 1:
            raise ValueError(f"PrioritizedReplay.sample: batch_size must be >= 1, got {batch_size}")
        total = self._tree.total
        if stratified:
            u = (np.arange(batch_size) + rng.random(batch_size)) / batch_size
        else:
            u = rng.random(batch_size)
        idx = self._tree.find(u * total)
        idx = np.minimum(idx, self._size - 1)  # float rounding at the right edge
        if not self._live[idx].all():  # rounding landed on a retired (zero) leaf
            live_idx = np.flatnonzero(self._live[: self._size])
            pos = np.searchsorted(live_idx, idx).clip(0, live_idx.size - 1)
            idx = np.where(self._live[idx], idx, live_idx[pos])
        if self.uniform:
            weights = np.ones(batch_size, dtype=np.float32)
        else:
            n_live = self.live
            probs = self._tree.values(idx) / total
            leaves = self._tree.values()[: self._size]
            p_min = float(leaves[self._live[: self._size]].min()) / total
            weights = ((n_live * probs) ** (-self._beta)) / ((n_live * p_min) ** (-self._beta))
            weights = np.minimum(weights, 1.0).astype(np.float32)
        self.total_sampled += batch_size
        return [self._items[i] for i in idx], idx.astype(np.int64), weights  # type: ignore[misc]

    def update_priorities(
        self,
        indices: np.ndarray | Sequence[int],
        priorities: np.ndarray | Sequence[float],
        *,
        expected_generations: np.ndarray | None = None,
    ) -> None:
        """Set new priorities for ``indices``.

        With ``expected_generations`` (from :meth:`generations` at sampling time) slots whose
        item was overwritten in between are skipped."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        p = self._checked(priorities)
        if idx.shape != p.shape:
            raise ValueError(
                f"PrioritizedReplay.update_priorities: {idx.size} indices but {p.size} priorities"
            )
        if idx.size and (idx.min() < 0 or idx.max() >= self._size):
            raise IndexError(
                f"PrioritizedReplay.update_priorities: index out of range [0, {self._size})"
            )
        if expected_generations is not None:
            keep = self._generation[idx] == np.asarray(expected_generations).reshape(-1)
            idx, p = idx[keep], p[keep]
        self._priorities[idx] = p
        self._tree.update(idx, self._tree_values(p) * self._live[idx])  # retired stay at 0
        self.total_updates += int(idx.size)

    # ---- checkpoints ---------------------------------------------------------------------
    def state_dict(self, *, include_items: bool = False) -> dict[str, object]:
        """Buffer metadata (priorities, cursor, size, counters, settings), items optional."""
        state: dict[str, object] = {
            "capacity": self.capacity,
            "alpha": self.alpha,
            "beta": self._beta,
            "beta0": self.beta0,
            "uniform": self.uniform,
            "eps": self.eps,
            "priorities": self._priorities.copy(),
            "generation": self._generation.copy(),
            "live": self._live.copy(),
            "cursor": self._cursor,
            "size": self._size,
            "total_added": self.total_added,
            "total_sampled": self.total_sampled,
            "total_updates": self.total_updates,
            "total_retired": self.total_retired,
        }
        if include_items:
            state["items"] = list(self._items)
        return state

    def load_counters(self, state: dict[str, object]) -> None:
        """Restore only the running counters of a :meth:`state_dict` (a resumed run whose items
        are gone): settings (capacity, alpha, eps, beta0) stay those this buffer was built with,
        so a resume with a changed config uses the new ones."""
        self.total_added = int(state["total_added"])
        self.total_sampled = int(state["total_sampled"])
        self.total_updates = int(state["total_updates"])
        self.total_retired = int(state.get("total_retired", 0))

    def load_state_dict(self, state: dict[str, object], items: Sequence[T] | None = None) -> None:
        """Restore from :meth:`state_dict`.

        Items come from ``state["items"]`` or the ``items`` argument (slot order, ``capacity``
        long or ``size`` long). Without items the counters and settings are restored and the
        buffer starts empty (metadata of items that are gone is dropped).
        """
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                "PrioritizedReplay.load_state_dict: capacity "
                f"{state['capacity']} != {self.capacity}"
            )
        self.alpha = float(state["alpha"])
        self.uniform = bool(state["uniform"])
        self.eps = float(state["eps"])
        self.beta0 = float(state["beta0"])
        self.beta = float(state["beta"])
        self.total_added = int(state["total_added"])
        self.total_sampled = int(state["total_sampled"])
        self.total_updates = int(state["total_updates"])
        self.total_retired = int(state.get("total_retired", 0))
        stored = items if items is not None else state.get("items")
        self._tree = SumTree(self.capacity)
        self._items = [None] * self.capacity
        if stored is None:
            self._priorities = np.zeros(self.capacity, dtype=np.float64)
            self._generation = np.full(self.capacity, -1, dtype=np.int64)
            self._live = np.zeros(self.capacity, dtype=bool)
            self._size = 0
            self._cursor = 0
            return
        size = int(state["size"])
        stored = list(stored)
        if len(stored) not in (size, self.capacity):
            raise ValueError(
                f"PrioritizedReplay.load_state_dict: {len(stored)} items for size {size}"
            )
        self._items[: len(stored)] = stored
        self._priorities = np.asarray(state["priorities"], dtype=np.float64).copy()
        self._generation = np.asarray(state["generation"], dtype=np.int64).copy()
        self._live = np.zeros(self.capacity, dtype=bool)
        self._live[:size] = np.asarray(state.get("live", np.ones(self.capacity, bool)))[:size]
        self._size = size
        self._cursor = int(state["cursor"])
        if size:
            values = self._tree_values(self._priorities[:size]) * self._live[:size]
            self._tree.update(np.arange(size), values)
