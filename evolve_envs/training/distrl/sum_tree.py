"""A sum-tree in one NumPy array: prefix-sum sampling and priority updates vectorised over a
batch (``O(B log N)``), the index of prioritized replay.

Example:
    >>> import numpy as np
    >>> tree = SumTree(4)
    >>> tree.update(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    >>> tree.find(np.array([0.5, 1.5, 9.9])).tolist()
    [0, 1, 3]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["SumTree"]


class SumTree:
    """Binary tree whose internal nodes hold the sum of their children's values.

    Leaves ``0 .. capacity-1``; :meth:`find` maps prefix sums in ``[0, total)`` to leaves, so a
    uniform draw of the prefix sum picks leaf ``i`` with probability ``value_i / total``."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._leaves = 1
        while self._leaves < self.capacity:
            self._leaves *= 2
        self._depth = self._leaves.bit_length() - 1
        # node 1 is the root, node k has children 2k and 2k+1, leaves at _leaves .. 2*_leaves-1
        self._tree = np.zeros(2 * self._leaves, dtype=np.float64)

    @property
    def total(self) -> float:
        """Sum of all leaf values."""
        return float(self._tree[1])

    def values(self, indices: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
        """Leaf values (all ``capacity`` of them, or those at ``indices``)."""
        leaves = self._tree[self._leaves : self._leaves + self.capacity]
        return leaves.copy() if indices is None else leaves[np.asarray(indices, dtype=np.int64)]

    def leaf_min(self, count: int) -> float:
        """Smallest value among leaves ``0 .. count-1``."""
        return float(self._tree[self._leaves : self._leaves + count].min())

    def update(
        self, indices: np.ndarray | Sequence[int], values: np.ndarray | Sequence[float]
    ) -> None:
        """Set leaves ``indices`` to ``values`` (with repeated indices the last one wins)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        val = np.asarray(values, dtype=np.float64).reshape(-1)
        if idx.shape != val.shape:
            raise ValueError(f"SumTree.update: {idx.size} indices but {val.size} values")
        if idx.size == 0:
            return
        if idx.min() < 0 or idx.max() >= self.capacity:
            raise IndexError(f"SumTree.update: index out of range [0, {self.capacity})")
        nodes = idx + self._leaves
        self._tree[nodes] = val  # NumPy fancy assignment: the last duplicate wins
        # Repeated parents are harmless (each copy writes the same sum), so no np.unique.
        for _ in range(self._depth):
            nodes >>= 1
            self._tree[nodes] = self._tree[2 * nodes] + self._tree[2 * nodes + 1]

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """Leaf index for each prefix sum (vectorised descent, one step per tree level)."""
        v = np.asarray(prefix_sums, dtype=np.float64).copy()
        nodes = np.ones(v.shape, dtype=np.int64)
        for _ in range(self._depth):
            nodes <<= 1
            left = self._tree[nodes]
            go_right = v >= left
            v -= left * go_right
            nodes += go_right
        return nodes - self._leaves
