"""Sum-tree and min-tree over a fixed number of leaves, vectorized over batches in numpy.

The trees are 32-ary (a wide fanout keeps the number of numpy calls per batch small): level 0
holds the leaves, and node ``j`` of level ``i + 1`` covers nodes ``[32 j, 32 j + 32)`` of level
``i``. Levels are added until one has at most 1,024 nodes: that top level is not reduced further,
so the total (minimum) is a sum (min) over it and a prefix search starts with one
``searchsorted`` over its cumulative sum. For 1 M leaves the levels hold 1 M, 32 K and 1 K nodes.

Below the top, each level also keeps the running sums of every row of 32 siblings, so a prefix
search step is one gather, one comparison and one subtraction; a parent is the last running sum
of its row. A batched update rewrites the touched leaves, then recomputes each touched row's
running sums (``numpy.cumsum``) and parent, level by level. A node therefore always equals the
same reduction of its children, whatever the order of updates: a tree rebuilt from its leaves is
bit-identical to one reached by any sequence of updates (checkpoints store leaves only).
"""

from __future__ import annotations

import numpy as np

FANOUT = 32
TOP = 1024


def _last_positive(rows: np.ndarray) -> np.ndarray:
    """Index of the last positive entry of each row (rows have at least one)."""
    return rows.shape[-1] - 1 - np.argmax(rows[..., ::-1] > 0.0, axis=-1)


class SumMinTree:
    """Leaf values with batched updates, prefix-sum search, total and minimum.

    Unset leaves hold 0 in the sum-tree and +inf in the min-tree, so they are never sampled and
    never the minimum.

    Args:
        capacity: Number of leaves.

    Examples:
        >>> tree = SumMinTree(4)
        >>> tree.update(np.array([0, 1, 2]), np.array([1.0, 2.0, 3.0]))
        >>> tree.total, tree.min
        (6.0, 1.0)
        >>> tree.find(np.array([0.5, 1.0, 2.9, 3.0, 5.99])).tolist()
        [0, 1, 1, 2, 2]
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: must be >= 1, got {capacity}")
        self.capacity = capacity
        sizes = [capacity]
        while sizes[-1] > TOP:
            sizes.append(-(-sizes[-1] // FANOUT))
        # Every level but the top is padded to whole rows of FANOUT siblings.
        padded = [-(-n // FANOUT) * FANOUT for n in sizes[:-1]] + [sizes[-1]]
        self.sums = [np.zeros(n, dtype=np.float64) for n in padded]
        self.mins = [np.full(n, np.inf, dtype=np.float64) for n in padded]
        self.running = [np.zeros((n // FANOUT, FANOUT), dtype=np.float64) for n in padded[:-1]]

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self.sums[-1].sum())

    @property
    def min(self) -> float:
        """Smallest set leaf (+inf when none is set)."""
        return float(self.mins[-1].min())

    def leaves(self, count: int | None = None) -> np.ndarray:
        """A copy of the first ``count`` leaf values (all leaves by default)."""
        return self.sums[0][: self.capacity if count is None else count].copy()

    def __getitem__(self, slots: np.ndarray) -> np.ndarray:
        return self.sums[0][slots]

    def update(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Sets ``leaf[slots] = values`` (slots should be distinct; else any one value wins).

        Args:
            slots: int array of leaf indices in ``[0, capacity)``.
            values: Non-negative finite floats.
        """
        slots = np.asarray(slots, dtype=np.int64)
        if slots.size == 0:
            return
        values = np.asarray(values, dtype=np.float64)
        self.sums[0][slots] = values
        self.mins[0][slots] = values
        self._propagate(slots)

    def clear(self, slots: np.ndarray) -> None:
        """Unsets leaves (sum 0, min +inf)."""
        slots = np.asarray(slots, dtype=np.int64)
        self.sums[0][slots] = 0.0
        self.mins[0][slots] = np.inf
        self._propagate(slots)

    def _propagate(self, nodes: np.ndarray) -> None:
        for level, running in enumerate(self.running):
            rows = np.unique(nodes // FANOUT) if len(nodes) > 64 else nodes // FANOUT
            sums = np.cumsum(self.sums[level].reshape(-1, FANOUT)[rows], axis=1)
            running[rows] = sums
            self.sums[level + 1][rows] = sums[:, -1]
            self.mins[level + 1][rows] = self.mins[level].reshape(-1, FANOUT)[rows].min(axis=1)
            nodes = rows

    def rebuild(self, values: np.ndarray) -> None:
        """Sets the first ``len(values)`` leaves, unsets the rest, and recomputes every node."""
        values = np.asarray(values, dtype=np.float64)
        if len(values) > self.capacity:
            raise ValueError(f"{len(values)} leaves do not fit a tree of {self.capacity}")
        self.sums[0][:] = 0.0
        self.mins[0][:] = np.inf
        self.sums[0][: len(values)] = values
        self.mins[0][: len(values)] = values
        for level, running in enumerate(self.running):
            running[:] = np.cumsum(self.sums[level].reshape(-1, FANOUT), axis=1)
            count = len(running)
            self.sums[level + 1][:] = 0.0
            self.mins[level + 1][:] = np.inf
            self.sums[level + 1][:count] = running[:, -1]
            self.mins[level + 1][:count] = self.mins[level].reshape(-1, FANOUT).min(axis=1)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each prefix mass ``u`` in ``[0, total)``, the leaf whose cumulative range holds it.

        Leaf ``i`` covers ``[sum(leaf[:i]), sum(leaf[:i + 1]))``. A node of zero mass is never
        chosen, so rounding at a boundary cannot pick an unset leaf.

        Args:
            prefix: float array of masses.

        Returns:
            int64 array of leaf indices, one per mass.
        """
        leaves = self._descend(np.array(prefix, dtype=np.float64), guarded=False)
        unset = self.sums[0][leaves] <= 0.0
        if unset.any():  # rounding at a row's end: redo those few, never entering empty nodes
            leaves[unset] = self._descend(np.array(prefix, dtype=np.float64)[unset], guarded=True)
        return leaves

    def _descend(self, value: np.ndarray, *, guarded: bool) -> np.ndarray:
        top = self.sums[-1]
        cumulative = np.cumsum(top)
        nodes = np.searchsorted(cumulative, value, side="right")
        nodes = np.minimum(nodes, _last_positive(top) if guarded else len(top) - 1)
        value -= np.where(nodes > 0, cumulative[nodes - 1], 0.0)
        batch = np.arange(len(value))
        for level in range(len(self.running) - 1, -1, -1):
            running = self.running[level][nodes]
            chosen = (running <= value[:, None]).sum(axis=1)
            if guarded:
                children = self.sums[level].reshape(-1, FANOUT)[nodes]
                chosen = np.minimum(chosen, _last_positive(children))
            else:
                chosen = np.minimum(chosen, FANOUT - 1)
            value -= np.where(chosen > 0, running[batch, chosen - 1], 0.0)
            nodes = nodes * FANOUT + chosen
        return nodes.astype(np.int64)
