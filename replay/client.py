"""The replay client: routes writes to shards and samples batches across them."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import ray

from replay.receipts import WriteReceipt
from replay.samplers import EmptyReplayError
from replay.storage import Batch


class ReplayClient:
    """Client of a sharded replay service, usable from the driver, collectors and learners.

    Writes go to one shard chosen by the writer (``shard=`` or a hash of ``writer_id``), so each
    writer's sequence numbers are checked by one shard. Samples are split across shards in
    proportion to their sizes (multinomial over the sizes last reported), fetched concurrently,
    and concatenated; the sizes are refreshed by every sample reply.

    Examples:
        >>> client = ReplayClient(shards)  # doctest: +SKIP
        >>> receipt = client.write(batch, writer_id="collector-0", seq=0)  # doctest: +SKIP
        >>> batch = client.sample(256)  # doctest: +SKIP
    """

    def __init__(self, shards: Sequence[ray.actor.ActorHandle], *, seed: int | None = None) -> None:
        if not shards:
            raise ValueError("a replay client needs at least one shard")
        self.shards = list(shards)
        self.rng = np.random.default_rng(seed)
        self.sizes = np.zeros(len(self.shards), dtype=np.int64)

    def shard_for(self, writer_id: str) -> int:
        """The shard a writer's batches go to when no shard is named."""
        return zlib.crc32(writer_id.encode()) % len(self.shards)

    def write_async(
        self, batch: Batch, writer_id: str, seq: int, *, shard: int | None = None
    ) -> ray.ObjectRef:
        """Sends a write and returns the reference of its :class:`WriteReceipt`."""
        index = self.shard_for(writer_id) if shard is None else shard % len(self.shards)
        return self.shards[index].write.remote(batch, writer_id, seq)

    def write(
        self, batch: Batch, writer_id: str, seq: int, *, shard: int | None = None
    ) -> WriteReceipt:
        """Writes a batch and waits for its receipt."""
        return ray.get(self.write_async(batch, writer_id, seq, shard=shard))

    def refresh_sizes(self) -> np.ndarray:
        """Asks every shard for its size."""
        stats = ray.get([s.stats.remote() for s in self.shards])
        self.sizes = np.array([s["size"] for s in stats], dtype=np.int64)
        return self.sizes

    def split(self, batch_size: int) -> np.ndarray:
        """How many items of a batch each shard contributes (proportional to size)."""
        if self.sizes.sum() == 0:
            self.refresh_sizes()
        total = self.sizes.sum()
        if total == 0:
            raise EmptyReplayError("cannot sample: every replay shard is empty")
        return self.rng.multinomial(batch_size, self.sizes / total)

    def sample_async(self, batch_size: int) -> list[tuple[int, ray.ObjectRef]]:
        """Sends the per-shard sample requests; pass the result to :meth:`collect`."""
        counts = self.split(batch_size)
        return [(i, self.shards[i].sample.remote(int(n))) for i, n in enumerate(counts) if n > 0]

    def collect(self, pending: list[tuple[int, ray.ObjectRef]]) -> dict[str, np.ndarray]:
        """Waits for the replies of :meth:`sample_async` and concatenates them.

        The result carries ``"shard"`` and ``"index"`` arrays naming each item's origin.
        """
        replies = ray.get([ref for _, ref in pending])
        parts = []
        for (shard, _), (part, size) in zip(pending, replies, strict=True):
            self.sizes[shard] = size
            part["shard"] = np.full(len(part["index"]), shard, dtype=np.int64)
            parts.append(part)
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """Samples ``batch_size`` transitions across shards, proportional to their sizes.

        Raises:
            EmptyReplayError: If every shard is empty.
        """
        return self.collect(self.sample_async(batch_size))

    def stats(self) -> list[dict[str, int]]:
        """Every shard's size and counters."""
        return ray.get([s.stats.remote() for s in self.shards])
