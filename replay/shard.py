"""The ReplayShard Ray actor: a thin shell over :class:`replay.table.ReplayTable`."""

from __future__ import annotations

import ray

from replay.receipts import WriteReceipt
from replay.storage import Batch
from replay.table import ReplayTable


class ReplayShard:
    """One shard of the replay service (use :func:`remote_shard` to start it as an actor).

    Args:
        shard_id: Index of this shard in the service.
        capacity: Number of transitions this shard holds.
        sampler: Sampler name (see ``replay.table.SAMPLERS``).
        seed: Seed of the shard's sampling RNG.
    """

    def __init__(self, shard_id: int, capacity: int, sampler: str = "uniform", seed: int = 0):
        self.table = ReplayTable(capacity, shard_id=shard_id, sampler=sampler, seed=seed)

    def write(self, batch: Batch, writer_id: str, seq: int) -> WriteReceipt:
        """Stores a batch; see :meth:`ReplayTable.write`."""
        return self.table.write(batch, writer_id, seq)

    def sample(self, batch_size: int) -> tuple[dict, int]:
        """Returns ``(batch, size)``: a uniform sample and this shard's size after it."""
        if batch_size == 0:
            return {}, len(self.table)
        return self.table.sample(batch_size), len(self.table)

    def stats(self) -> dict[str, int]:
        """Size and counters of this shard."""
        return self.table.stats()


def remote_shard(
    run_name: str,
    shard_id: int,
    capacity: int,
    *,
    sampler: str = "uniform",
    seed: int = 0,
    num_cpus: float = 0.5,
    max_restarts: int = 0,
) -> ray.actor.ActorHandle:
    """Starts a named ReplayShard actor ``<run>.replay-<i>`` in namespace ``relayrl``."""
    actor_cls = ray.remote(ReplayShard).options(
        name=f"{run_name}.replay-{shard_id}",
        namespace="relayrl",
        num_cpus=num_cpus,
        max_restarts=max_restarts,
        max_concurrency=1,
    )
    return actor_cls.remote(shard_id, capacity, sampler, seed)
