"""The pure core of one replay shard: storage, sampler, dedup, priorities, counters (no Ray)."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np

from replay.frames import FrameStackStorage
from replay.receipts import WriteReceipt
from replay.sampling.samplers import (
    FifoSampler,
    PrioritizedSampler,
    UniformSampler,
    importance_weights,
)
from replay.storage import Batch, CircularStorage

# Redraws of dead items (frame-deduplicated tables) before a sample gives up.
MAX_REDRAWS = 64

SAMPLERS = ("uniform", "prioritized", "fifo")
# Writers whose dedup state a table keeps (least recently written first out).
MAX_WRITERS = 65_536


class ReplayTable:
    """One shard's table of transitions.

    Writes are batches tagged with ``(writer_id, seq)``. Writers number their writes 0, 1, 2, ...;
    a write whose ``seq`` is not above the writer's last stored one is a retry: it is acknowledged
    with the original receipt (``duplicate=True``) and stores nothing. The dedup state is kept
    for the :data:`MAX_WRITERS` most recently written writers (in memory and in checkpoints).

    Every stored item has an *insertion id*: the table's write count when it was stored (item
    ``k`` of the table's history has id ``k`` and lives in slot ``k % capacity``). Samples carry
    ``"index"`` (slot) and ``"insertion_id"``; a priority update names both, and is dropped for a
    slot that has since been overwritten.

    Args:
        capacity: Number of transitions held.
        shard_id: Index of the shard this table backs (reported in receipts).
        sampler: ``uniform``, ``prioritized`` or ``fifo`` (see ``replay.sampling.samplers``).
        seed: Seed of the sampler's generator.
        alpha: Prioritization exponent (``prioritized`` only).
        fifo_shuffle: Hand out each FIFO pass in a random order (``fifo`` only).
        fifo_queue: A FIFO table is a queue: each item handed out once (``fifo`` only).
        mmap_dir: Memory-map the storage from files in this directory instead of RAM.
        frame_stack: 0 stores writes as they come; ``S >= 1`` stores frame-stream writes in a
            :class:`replay.frames.FrameStackStorage` that rebuilds ``S``-frame stacks.

    Examples:
        >>> table = ReplayTable(capacity=8, shard_id=0, seed=0)
        >>> receipt = table.write({"x": np.zeros((3, 2), np.float32)}, writer_id="c0", seq=0)
        >>> receipt.write_count, table.write({"x": np.zeros((3, 2), np.float32)}, "c0", 0).duplicate
        (3, True)
        >>> table.sample(4)["x"].shape
        (4, 2)
    """

    def __init__(
        self,
        capacity: int,
        *,
        shard_id: int = 0,
        sampler: str = "uniform",
        seed: int | None = None,
        alpha: float = 0.6,
        fifo_shuffle: bool = False,
        fifo_queue: bool = False,
        mmap_dir: str | Path | None = None,
        frame_stack: int = 0,
    ) -> None:
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler: must be one of {SAMPLERS}, got {sampler!r}")
        self.shard_id = shard_id
        if frame_stack:
            self.storage = FrameStackStorage(capacity, stack=frame_stack, directory=mmap_dir)
        else:
            self.storage = CircularStorage(capacity, directory=mmap_dir)
        self.insertion_ids = np.full(capacity, -1, dtype=np.int64)
        if sampler == "prioritized":
            self.sampler = PrioritizedSampler(capacity, alpha=alpha, seed=seed)
        elif sampler == "fifo":
            self.sampler = FifoSampler(
                self.insertion_ids, shuffle=fifo_shuffle, seed=seed, queue=fifo_queue
            )
        else:
            self.sampler = UniformSampler(seed)
        self.write_count = 0
        self.sample_count = 0
        self.priority_updates = 0
        self.stale_updates = 0
        self._last: collections.OrderedDict[str, WriteReceipt] = collections.OrderedDict()
        # Set to a list, draws of dead items record (slots, insertion ids) here instead of
        # zeroing their priorities at once (a deterministic shard applies them at its commit).
        self.dead_draws: list[tuple[np.ndarray, np.ndarray]] | None = None

    def __len__(self) -> int:
        return len(self.storage)

    @property
    def capacity(self) -> int:
        """Number of transitions held when full."""
        return self.storage.capacity

    def write(self, batch: Batch, writer_id: str, seq: int) -> WriteReceipt:
        """Stores a batch once per ``(writer_id, seq)`` and returns its receipt.

        Raises:
            replay.storage.SchemaError: If the batch does not match the table; nothing is stored.
        """
        last = self._last.get(writer_id)
        if last is not None and seq <= last.seq:
            indices = last.indices if seq == last.seq else np.empty(0, np.int64)
            return WriteReceipt(
                self.shard_id, writer_id, seq, indices, self.write_count, duplicate=True
            )
        indices = self.storage.write(batch)
        kept = indices >= 0
        self.insertion_ids[indices[kept]] = self.write_count + np.flatnonzero(kept)
        self.sampler.on_write(indices[kept])
        self.write_count += len(indices)
        receipt = WriteReceipt(self.shard_id, writer_id, seq, indices, self.write_count)
        self._last[writer_id] = receipt
        self._last.move_to_end(writer_id)
        if len(self._last) > MAX_WRITERS:  # a bounded dedup state (idle writers go first)
            self._last.popitem(last=False)
        return receipt

    def sample(self, batch_size: int, *, beta: float | None = None) -> dict[str, np.ndarray]:
        """Draws ``batch_size`` transitions with the table's sampler.

        Args:
            batch_size: Items to draw (may exceed the size: see ``replay.sampling.samplers``).
            beta: Prioritized tables only: add ``"weight"``, the importance weights of this
                table alone (a sharded service normalizes over all shards in the client).

        Returns:
            Mapping from key to array of ``batch_size`` rows, plus ``"index"`` (slots) and
            ``"insertion_id"``; prioritized tables add ``"probability"`` (of each draw), FIFO
            tables ``"fifo_pass"`` (the number of the pass each item belongs to).

        Raises:
            replay.sampling.samplers.EmptyReplayError: If the table holds nothing.
        """
        passes = None
        if isinstance(self.sampler, FifoSampler):
            indices, passes = self.sampler.sample_passes(batch_size, len(self.storage))
        else:
            indices = self.sampler.sample(batch_size, len(self.storage))
            if isinstance(self.storage, FrameStackStorage):
                indices = self._redraw_dead(indices)
        batch = self.storage.gather(indices)
        batch["index"] = indices
        batch["insertion_id"] = self.insertion_ids[indices]
        if passes is not None:
            batch["fifo_pass"] = passes
        if isinstance(self.sampler, PrioritizedSampler):
            total = self.sampler.tree.total
            batch["probability"] = self.sampler.masses(indices) / total
            if beta is not None:
                min_probability = self.sampler.tree.min / total
                batch["weight"] = importance_weights(batch["probability"], min_probability, beta)
        self.sample_count += len(indices)
        return batch

    def _redraw_dead(self, indices: np.ndarray) -> np.ndarray:
        """Replaces draws of items whose frames were overwritten (see ``replay.frames``).

        Dead items of a prioritized table get the smallest priority, so they are rarely drawn
        again before their slots are reused.
        """
        for _ in range(MAX_REDRAWS):
            dead = ~self.storage.live(indices)
            if not dead.any():
                return indices
            if self.dead_draws is not None:
                self.dead_draws.append((indices[dead], self.insertion_ids[indices[dead]]))
            elif isinstance(self.sampler, PrioritizedSampler):
                self.sampler.update(indices[dead], np.zeros(int(dead.sum())))
            indices = indices.copy()
            indices[dead] = self.sampler.sample(int(dead.sum()), len(self.storage))
        raise RuntimeError(f"replay shard {self.shard_id}: no live item after {MAX_REDRAWS} draws")

    def update_priorities(
        self, indices: np.ndarray, insertion_ids: np.ndarray, priorities: np.ndarray
    ) -> int:
        """Sets the priorities of sampled items; returns how many were applied.

        An item is named by its slot and insertion id; where the slot now holds a newer item the
        update is dropped (counted in ``stale_updates``), never applied to the successor.

        Raises:
            ValueError: On a non-prioritized table, mismatched lengths, slots out of range, or
                negative or non-finite priorities.
        """
        if not isinstance(self.sampler, PrioritizedSampler):
            raise ValueError(f"update_priorities: the table's sampler is {self.sampler.kind!r}")
        indices = np.asarray(indices, dtype=np.int64)
        insertion_ids = np.asarray(insertion_ids, dtype=np.int64)
        priorities = np.asarray(priorities, dtype=np.float64)
        if not len(indices) == len(insertion_ids) == len(priorities):
            raise ValueError("update_priorities: indices, insertion_ids, priorities lengths differ")
        if len(indices) and (indices.min() < 0 or indices.max() >= self.capacity):
            raise ValueError(f"update_priorities: slots must be in [0, {self.capacity})")
        if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
            raise ValueError("update_priorities: priorities must be finite and >= 0")
        live = self.insertion_ids[indices] == insertion_ids
        self.sampler.update(indices[live], priorities[live])
        applied = int(live.sum())
        self.priority_updates += applied
        self.stale_updates += len(indices) - applied
        return applied

    def clear(self) -> int:
        """Drops every stored item (an on-policy iteration boundary); returns how many.

        Allocated columns, the write count (so insertion ids keep increasing) and the writers'
        dedup state are kept: a retry of a write stored before the clear is still recognized.
        """
        dropped = len(self.storage)
        self.storage.cursor = 0
        self.storage.size = 0
        self.insertion_ids[:] = -1
        self.sampler.clear()
        return dropped

    def info(self) -> dict:
        """What a client needs to split a batch across shards and normalize weights."""
        info = {"size": len(self.storage), "sampler": self.sampler.kind}
        if isinstance(self.sampler, PrioritizedSampler):
            info["mass"] = self.sampler.tree.total
            info["min_mass"] = self.sampler.tree.min
        elif isinstance(self.sampler, FifoSampler):
            info["remaining"] = self.sampler.remaining
        return info

    def stats(self) -> dict:
        """Counters for metrics and accounting."""
        return {
            "shard_id": self.shard_id,
            "size": len(self.storage),
            "capacity": self.capacity,
            "bytes": self.storage.nbytes,
            "write_count": self.write_count,
            "sample_count": self.sample_count,
            "priority_updates": self.priority_updates,
            "stale_updates": self.stale_updates,
            "sampler": self.sampler.kind,
        }
