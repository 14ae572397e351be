"""Slot samplers of a replay table: uniform, prioritized (proportional) and FIFO.

A sampler picks storage slots; the table gathers the rows. Every sampler draws from its own
``numpy.random.Generator`` (PCG64) whose state is part of a checkpoint, and exposes its state as
arrays (``.npy`` files) plus JSON-able metadata, so a restored table draws the same next samples.

Sampling an empty table raises :class:`EmptyReplayError`. Asking for more items than are stored
is allowed: uniform and prioritized sampling are with replacement, and FIFO sampling continues
into the next pass.
"""

from __future__ import annotations

import numpy as np

from replay.sampling.sumtree import SumMinTree

# Priorities below this are raised to it, so that every stored item keeps a positive mass.
MIN_PRIORITY = 1e-10


class EmptyReplayError(RuntimeError):
    """Sampling was asked of a table that holds nothing."""


def rng_state(rng: np.random.Generator) -> dict:
    """The JSON-able state of a generator."""
    return rng.bit_generator.state


def restore_rng(rng: np.random.Generator, state: dict) -> None:
    """Restores a generator's state saved by :func:`rng_state`."""
    if state.get("bit_generator") != type(rng.bit_generator).__name__:
        raise ValueError(f"rng state is for {state.get('bit_generator')!r}, not PCG64")
    rng.bit_generator.state = state


def importance_weights(
    probabilities: np.ndarray, min_probability: float, beta: float
) -> np.ndarray:
    """Prioritized-replay importance weights ``(N P(i))^-beta / max_j (N P(j))^-beta``.

    The size ``N`` cancels, so the weights only need each sampled item's probability and the
    smallest probability of any item that can be drawn (over the whole service, not one shard).

    Args:
        probabilities: Probability with which each sampled item was drawn.
        min_probability: Smallest such probability over every sampleable item.
        beta: Correction exponent in ``[0, 1]``.

    Returns:
        float32 weights in ``(0, 1]``.
    """
    return np.power(probabilities / min_probability, -beta).astype(np.float32)


class UniformSampler:
    """Draws slots uniformly with replacement from the filled part of the storage."""

    kind = "uniform"

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def on_write(self, slots: np.ndarray) -> None:
        """Notes newly written slots (nothing to do)."""

    def clear(self) -> None:
        """Forgets every slot (nothing to do)."""

    def sample(self, batch_size: int, size: int) -> np.ndarray:
        """Returns ``batch_size`` slot indices in ``[0, size)``.

        Raises:
            EmptyReplayError: If ``size`` is 0.
        """
        if size <= 0:
            raise EmptyReplayError("cannot sample from an empty replay table")
        return self.rng.integers(0, size, size=batch_size, dtype=np.int64)

    def state(self, size: int) -> tuple[dict[str, np.ndarray], dict]:
        """``(arrays, metadata)`` to checkpoint."""
        return {}, {"rng": rng_state(self.rng)}

    def restore(self, arrays: dict[str, np.ndarray], meta: dict) -> None:
        """Restores what :meth:`state` returned."""
        restore_rng(self.rng, meta["rng"])


class PrioritizedSampler:
    """Proportional prioritized sampling (Schaul et al., 2016) over a sum-tree and a min-tree.

    Each slot's mass is ``priority ** alpha``; new items get the largest priority seen so far
    (1.0 at first), so they are likely to be replayed at least once. Draws are i.i.d.: slot ``i``
    is drawn with probability ``mass[i] / total``.

    Args:
        capacity: Number of slots.
        alpha: Prioritization exponent (0: uniform over stored items).
        seed: Seed of the sampling generator.
    """

    kind = "prioritized"

    def __init__(self, capacity: int, *, alpha: float = 0.6, seed: int | None = None) -> None:
        if alpha < 0:
            raise ValueError(f"alpha: must be >= 0, got {alpha!r}")
        self.rng = np.random.default_rng(seed)
        self.tree = SumMinTree(capacity)
        self.alpha = alpha
        self.max_priority = 1.0

    def on_write(self, slots: np.ndarray) -> None:
        """Gives newly written slots the largest priority seen so far."""
        self.tree.update(slots, np.full(len(slots), self.max_priority**self.alpha))

    def clear(self) -> None:
        """Forgets every slot's priority (the largest priority seen is kept)."""
        self.tree.rebuild(np.zeros(0))

    def sample(self, batch_size: int, size: int) -> np.ndarray:
        """Draws ``batch_size`` slots with probability proportional to their mass.

        Raises:
            EmptyReplayError: If no slot has mass.
        """
        total = self.tree.total
        if size <= 0 or total <= 0.0:
            raise EmptyReplayError("cannot sample from an empty replay table")
        return self.tree.find(self.rng.random(batch_size) * total)

    def masses(self, slots: np.ndarray) -> np.ndarray:
        """``priority ** alpha`` of the given slots."""
        return self.tree[slots]

    def update(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Sets the priorities of slots (already checked to hold the intended items).

        Raises:
            ValueError: If a priority is negative or not finite.
        """
        priorities = np.asarray(priorities, dtype=np.float64)
        if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
            raise ValueError("priorities: must be finite and >= 0")
        if priorities.size == 0:
            return
        priorities = np.maximum(priorities, MIN_PRIORITY)
        self.tree.update(slots, priorities**self.alpha)
        self.max_priority = max(self.max_priority, float(priorities.max()))

    def state(self, size: int) -> tuple[dict[str, np.ndarray], dict]:
        """``(arrays, metadata)`` to checkpoint: the first ``size`` leaves."""
        meta = {"rng": rng_state(self.rng), "alpha": self.alpha, "max_priority": self.max_priority}
        return {"priority_mass": self.tree.leaves(size)}, meta

    def restore(self, arrays: dict[str, np.ndarray], meta: dict) -> None:
        """Restores what :meth:`state` returned (the trees are rebuilt from the leaves)."""
        restore_rng(self.rng, meta["rng"])
        self.alpha = float(meta["alpha"])
        self.max_priority = float(meta["max_priority"])
        self.tree.rebuild(arrays["priority_mass"])


class FifoSampler:
    """On-policy sampling: each stored item is handed out exactly once per pass.

    A pass is the set of items stored when it starts, oldest first (or in a random order with
    ``shuffle``). Items written during a pass wait for the next one; items overwritten during a
    pass are skipped. A request larger than what is left of the pass finishes it and continues
    with the next pass.

    As a *queue* (``queue=True``: the asynchronous on-policy loop's learner queue), each item is
    handed out once in its lifetime, oldest first, and never again: a request takes the oldest
    items not handed out yet and comes back short when fewer are stored (``remaining`` counts
    them). Handed-out items stay stored until overwritten.

    Args:
        insertion_ids: The table's per-slot insertion ids (-1 for empty slots); read, not owned.
        shuffle: Hand out each pass in a random order instead of insertion order (not a queue).
        seed: Seed of the shuffling generator.
        queue: Hand out each item once (see above) instead of once per pass.
    """

    kind = "fifo"

    def __init__(
        self,
        insertion_ids: np.ndarray,
        *,
        shuffle: bool = False,
        seed: int | None = None,
        queue: bool = False,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.ids = insertion_ids
        self.shuffle = shuffle
        self.queue = queue
        self.taken_id = -1  # queue: the newest insertion id handed out
        self.order = np.empty(0, dtype=np.int64)
        self.order_ids = np.empty(0, dtype=np.int64)
        self.position = 0
        self.passes = 0

    @property
    def remaining(self) -> int:
        """Items left in the current pass (a queue: items never handed out)."""
        if self.queue:
            return int(np.count_nonzero(self.ids > self.taken_id))
        return len(self.order) - self.position

    def on_write(self, slots: np.ndarray) -> None:
        """Notes newly written slots (they join the next pass)."""

    def clear(self) -> None:
        """Ends the current pass (the table dropped its items)."""
        self.order = np.empty(0, dtype=np.int64)
        self.order_ids = np.empty(0, dtype=np.int64)
        self.position = 0

    def _start_pass(self) -> None:
        slots = np.flatnonzero(self.ids >= 0)
        if self.shuffle:
            order = self.rng.permutation(slots)
        else:
            order = slots[np.argsort(self.ids[slots], kind="stable")]
        self.order = order.astype(np.int64)
        self.order_ids = self.ids[self.order]
        self.position = 0
        self.passes += 1

    def sample(self, batch_size: int, size: int) -> np.ndarray:
        """Returns the next ``batch_size`` slots of the current pass (and of the next ones).

        Raises:
            EmptyReplayError: If the table holds nothing.
        """
        return self.sample_passes(batch_size, size)[0]

    def sample_passes(self, batch_size: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`sample`, plus the number of the pass (1, 2, ...) each slot belongs to."""
        if size <= 0:
            raise EmptyReplayError("cannot sample from an empty replay table")
        if self.queue:
            slots = np.flatnonzero(self.ids > self.taken_id)
            slots = slots[np.argsort(self.ids[slots], kind="stable")][:batch_size]
            if len(slots):
                self.taken_id = int(self.ids[slots[-1]])
            return slots.astype(np.int64), np.zeros(len(slots), dtype=np.int64)
        parts, passes, need = [], [], batch_size
        while need > 0:
            if self.remaining == 0:
                self._start_pass()
            take = slice(self.position, self.position + need)
            slots, ids = self.order[take], self.order_ids[take]
            self.position += len(slots)
            live = slots[self.ids[slots] == ids]
            parts.append(live)
            passes.append(np.full(len(live), self.passes, dtype=np.int64))
            need -= len(live)
        if not parts:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return np.concatenate(parts), np.concatenate(passes)

    def state(self, size: int) -> tuple[dict[str, np.ndarray], dict]:
        """``(arrays, metadata)`` to checkpoint: the current pass and the position in it."""
        meta = {
            "rng": rng_state(self.rng),
            "position": self.position,
            "passes": self.passes,
            "shuffle": self.shuffle,
            "taken_id": self.taken_id,
            "queue": self.queue,
        }
        return {"pass_order": self.order, "pass_ids": self.order_ids}, meta

    def restore(self, arrays: dict[str, np.ndarray], meta: dict) -> None:
        """Restores what :meth:`state` returned."""
        restore_rng(self.rng, meta["rng"])
        self.shuffle = bool(meta["shuffle"])
        self.order = arrays["pass_order"].astype(np.int64)
        self.order_ids = arrays["pass_ids"].astype(np.int64)
        self.position = int(meta["position"])
        self.passes = int(meta["passes"])
        self.taken_id = int(meta.get("taken_id", -1))
        self.queue = bool(meta.get("queue", False))
