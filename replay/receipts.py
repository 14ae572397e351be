"""Messages produced by the replay service."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class WriteReceipt:
    """Acknowledgement of one batched write into one replay shard.

    Attributes:
        shard_id: Index of the shard that stored the batch.
        writer_id: Identifier of the writer (a collector id or an external client id).
        seq: The writer's sequence number for this write; ``(writer_id, seq)`` is the dedup key.
        indices: Storage slots that hold the batch, in batch order.
        write_count: The shard's total number of stored items after this write.
        duplicate: True when the write was a retry of one already stored (nothing was stored).
    """

    shard_id: int
    writer_id: str
    seq: int
    indices: np.ndarray
    write_count: int
    duplicate: bool = False

    @property
    def num_items(self) -> int:
        """Number of items the write covers."""
        return len(self.indices)
