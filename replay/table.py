"""The pure core of one replay shard: storage, sampler, dedup and counters (no Ray)."""

from __future__ import annotations

import numpy as np

from replay.receipts import WriteReceipt
from replay.samplers import UniformSampler
from replay.storage import Batch, CircularStorage

SAMPLERS = ("uniform",)


class ReplayTable:
    """One shard's table of transitions.

    Writes are batches tagged with ``(writer_id, seq)``. Writers number their writes 0, 1, 2, ...;
    a write whose ``seq`` is not above the writer's last stored one is a retry: it is acknowledged
    with the original receipt (``duplicate=True``) and stores nothing.

    Examples:
        >>> table = ReplayTable(capacity=8, shard_id=0, seed=0)
        >>> receipt = table.write({"x": np.zeros((3, 2), np.float32)}, writer_id="c0", seq=0)
        >>> receipt.write_count, table.write({"x": np.zeros((3, 2), np.float32)}, "c0", 0).duplicate
        (3, True)
        >>> table.sample(4)["x"].shape
        (4, 2)
    """

    def __init__(
        self, capacity: int, *, shard_id: int = 0, sampler: str = "uniform", seed: int | None = None
    ) -> None:
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
        self.shard_id = shard_id
        self.storage = CircularStorage(capacity)
        self.sampler = UniformSampler(seed)
        self.write_count = 0
        self.sample_count = 0
        self._last: dict[str, WriteReceipt] = {}

    def __len__(self) -> int:
        return len(self.storage)

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
        self.write_count += len(indices)
        receipt = WriteReceipt(self.shard_id, writer_id, seq, indices, self.write_count)
        self._last[writer_id] = receipt
        return receipt

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """Draws ``batch_size`` transitions uniformly with replacement.

        Returns:
            Mapping from key to array of ``batch_size`` rows, plus ``"index"`` (the slots).

        Raises:
            replay.samplers.EmptyReplayError: If the table holds nothing.
        """
        indices = self.sampler.sample(len(self.storage), batch_size)
        batch = self.storage.gather(indices)
        batch["index"] = indices
        self.sample_count += batch_size
        return batch

    def stats(self) -> dict[str, int]:
        """Counters for metrics and accounting."""
        return {
            "shard_id": self.shard_id,
            "size": len(self.storage),
            "capacity": self.storage.capacity,
            "write_count": self.write_count,
            "sample_count": self.sample_count,
        }
