"""The ReplayShard Ray actor: a thin shell over :class:`replay.table.ReplayTable`."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import ray

from replay.config import ReplayConfig
from replay.digest import table_digest
from replay.persist.checkpoint import dump_table, load_table
from replay.persist.reshard import ItemSet, put_items, take_items
from replay.receipts import WriteReceipt
from replay.sampling.streams import stream_generator
from replay.shm import BlockViews, Layout, view_batch
from replay.staging import Staging
from replay.storage import Batch
from replay.table import ReplayTable

logger = logging.getLogger(__name__)

# A priority update on the wire: (slots, insertion ids, priorities).
Updates = tuple[np.ndarray, np.ndarray, np.ndarray]


class ReplayShard:
    """One shard of the replay service (use :func:`remote_shard` to start it as an actor).

    Args:
        shard_id: Index of this shard in the service.
        capacity: Number of transitions this shard holds.
        sampler: Sampler name (see ``replay.table.SAMPLERS``).
        seed: Seed of the shard's sampling RNG.

    Keyword Args:
        alpha: Prioritization exponent (``prioritized``).
        fifo_shuffle: Hand out FIFO passes in random order (``fifo``).
        fifo_queue: The FIFO table is a queue: each item handed out once (``fifo``).
        mmap_dir: Memory-map the storage from files under ``<mmap_dir>/shard-<i>-<tag>/``.
        frame_stack: Store frame-stream writes and rebuild stacks of this many frames
            (``replay.frames``; 0: store writes as they come).
        deterministic: Stage writes and priority updates until :meth:`commit`
            (``replay.staging``), and draw each sample that names a ``stream`` from its own
            generator (``replay.sampling.streams``) instead of the shard's.
        run_seed: The run's seed, the root of the shard's streams.
    """

    def __init__(
        self,
        shard_id: int,
        capacity: int,
        sampler: str = "uniform",
        seed: int = 0,
        *,
        alpha: float = 0.6,
        fifo_shuffle: bool = False,
        fifo_queue: bool = False,
        mmap_dir: str | None = None,
        frame_stack: int = 0,
        deterministic: bool = False,
        run_seed: int = 0,
    ) -> None:
        self.shard_id = shard_id
        self.run_seed = run_seed
        self.staging = Staging() if deterministic else None
        self.incarnation = uuid.uuid4().hex[:8]  # changes when Ray restarts the actor
        self.mmap_root = None if mmap_dir is None else Path(mmap_dir)
        self.shared_views = BlockViews()
        # Actor methods run one at a time; direct gRPC writes (``start_intake``) run on server
        # threads, so every use of the table takes this lock.
        self.lock = threading.Lock()
        self.intake = None  # (gate, server, address) once direct writes are on
        self.table = ReplayTable(
            capacity,
            shard_id=shard_id,
            sampler=sampler,
            seed=seed,
            alpha=alpha,
            fifo_shuffle=fifo_shuffle,
            fifo_queue=fifo_queue,
            mmap_dir=self._fresh_mmap_dir(),
            frame_stack=frame_stack,
        )
        self._stage_dead_draws()

    def _stage_dead_draws(self) -> None:
        if self.staging is not None:  # dead draws wait for the commit like every update
            self.table.dead_draws = []

    def _fresh_mmap_dir(self) -> Path | None:
        if self.mmap_root is None:
            return None
        return self.mmap_root / f"shard-{self.shard_id}-{uuid.uuid4().hex[:8]}"

    def _write(self, batch: Batch, writer_id: str, seq: int) -> WriteReceipt:
        if self.staging is not None:
            return self.staging.write(self.table, batch, writer_id, seq)
        return self.table.write(batch, writer_id, seq)

    def write(self, batch: Batch, writer_id: str, seq: int) -> WriteReceipt:
        """Stores a batch (staged when deterministic); see :meth:`ReplayTable.write`."""
        with self.lock:
            return self._write(batch, writer_id, seq)

    def write_many(self, writes: list[tuple[Batch, str, int]]) -> list[WriteReceipt]:
        """Stores ``(batch, writer_id, seq)`` writes in order (one call for several)."""
        with self.lock:
            return [self._write(batch, writer_id, seq) for batch, writer_id, seq in writes]

    def write_shared_many(self, writes: list[tuple[str, Layout, str, int]]) -> list[WriteReceipt]:
        """Stores ``(path, layout, writer_id, seq)`` batches placed in shared memory, in order.

        The writer runs on this shard's node (see ``replay.shm``); each batch is copied into the
        table, so the writer may reuse its block once this call returns.
        """
        with self.lock:
            return [
                self._write(view_batch(self.shared_views, path, layout), writer_id, seq)
                for path, layout, writer_id, seq in writes
            ]

    def health(self) -> dict:
        """What the driver's health check needs: incarnation, size, node and process id."""
        return {
            "incarnation": self.incarnation,
            "size": len(self.table.storage),
            "node": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
        }

    def node_id(self) -> str:
        """The Ray node this shard runs on (writers on the same node may use shared memory)."""
        return ray.get_runtime_context().get_node_id()

    def sample(
        self,
        batch_size: int,
        updates: Updates | None = None,
        stream: tuple[int, ...] | None = None,
    ) -> tuple[dict[str, np.ndarray], dict]:
        """Applies (or stages) piggybacked priority updates, then samples.

        Args:
            batch_size: Items to draw.
            updates: Priority updates to apply first.
            stream: Names the request (``replay.sampling.streams`` key, e.g. rank and model
                version): the draw then comes from the stream ``(run seed, "replay", shard, 0,
                stream)``, the same whenever the request arrives.

        Returns:
            ``(batch, info)``: the sample (empty for ``batch_size`` 0) and :meth:`info` after it.
        """
        with self.lock:
            if updates is not None:
                self._update(*updates)
            if batch_size <= 0:
                return {}, self.table.info()
            if stream is None:
                return self.table.sample(batch_size), self.table.info()
            sampler = self.table.sampler
            own = sampler.rng
            sampler.rng = stream_generator(self.run_seed, "replay", self.shard_id, key=stream)
            try:
                return self.table.sample(batch_size), self.table.info()
            finally:
                sampler.rng = own

    def _update(self, indices, insertion_ids, priorities) -> int:
        if self.staging is not None:
            return self.staging.update(indices, insertion_ids, priorities)
        return self.table.update_priorities(indices, insertion_ids, priorities)

    def update_priorities(
        self, indices: np.ndarray, insertion_ids: np.ndarray, priorities: np.ndarray
    ) -> int:
        """See :meth:`ReplayTable.update_priorities`; returns the number applied (or staged)."""
        with self.lock:
            return self._update(indices, insertion_ids, priorities)

    def commit(self) -> dict:
        """Applies what is staged (deterministic shards; see ``replay.staging``).

        Returns:
            ``{"writes", "items", "updates"}`` applied, and the shard's :meth:`info` after.
        """
        with self.lock:
            applied = {} if self.staging is None else self.staging.commit(self.table)
            return {**applied, "info": self.table.info()}

    def digest(self) -> str:
        """SHA-256 of the table's contents (``replay.digest.table_digest``)."""
        with self.lock:
            return table_digest(self.table)

    def clear(self) -> int:
        """Drops every stored item; see :meth:`ReplayTable.clear`."""
        with self.lock:
            return self.table.clear()

    def info(self) -> dict:
        """Size and sampling masses (see :meth:`ReplayTable.info`)."""
        with self.lock:
            return self.table.info()

    def stats(self) -> dict:
        """Size and counters of this shard."""
        with self.lock:
            return self.table.stats()

    def dump(self, path: str) -> dict:
        """Writes this shard's table into directory ``path``; see :meth:`ReplayTable.dump`."""
        with self.lock:
            return dump_table(self.table, Path(path))

    def load(self, path: str) -> dict:
        """Replaces this shard's table with the one dumped in ``path``; returns its stats.

        Raises:
            replay.persist.npyio.CheckpointError: Naming the file that is missing, truncated or
                corrupt (the current table is kept).
        """
        old_dir = self.table.storage.directory
        table = load_table(Path(path), shard_id=self.shard_id, mmap_dir=self._fresh_mmap_dir())
        if table.capacity != self.table.capacity:
            logger.warning(
                "replay shard %d: restored capacity %d differs from the configured %d",
                self.shard_id,
                table.capacity,
                self.table.capacity,
            )
        with self.lock:
            self.table = table
            self._stage_dead_draws()
        if old_dir is not None:
            shutil.rmtree(old_dir, ignore_errors=True)  # the old mapping stays valid until freed
        return self.table.stats()

    def drain(self) -> ItemSet:
        """Hands out every stored item (``replay.persist.reshard``) and empties the table.

        Counters, write count and dedup state are kept. Writers must have stopped writing here.
        """
        with self.lock:
            items = take_items(self.table)
            self.table.clear()
            return items

    def absorb(self, items: ItemSet) -> int:
        """Stores drained items as new writes (``put_items``); returns how many."""
        with self.lock:
            return int((put_items(self.table, items) >= 0).sum())

    # -- direct gRPC writes (``replay.intake``) ----------------------------------------
    def start_intake(self, options: dict) -> str:
        """Serves ``Experience/Insert`` from this process; returns the address clients use.

        Args:
            options: What :func:`replay.intake.start_intake_server` takes (the run's spec,
                shards, ``grpc.host``, credentials, TLS and limits).
        """
        from replay.intake import start_intake_server
        from replay.wire.heap import keep_freed_memory

        keep_freed_memory()
        if self.intake is not None:
            return self.intake[2]
        self.intake = start_intake_server(
            self.write, self.shard_id, options, node_ip=ray.util.get_node_ip_address()
        )
        logger.info("replay shard %d takes Insert streams at %s", self.shard_id, self.intake[2])
        return self.intake[2]

    def intake_set(
        self, *, open: bool, closed: bool, total_frames: int, published_version: int = -1
    ) -> None:
        """The driver's intake state (see ``replay.intake.IntakeGate.set``)."""
        if self.intake is not None:
            self.intake[0].set(
                open=open,
                closed=closed,
                total_frames=total_frames,
                published_version=published_version,
            )

    def intake_drain(self, total_frames: int = 0, published_version: int = -1) -> list:
        """Receipts of direct writes stored since the last drain (the run's count and version)."""
        if self.intake is None:
            return []
        return self.intake[0].drain(total_frames, published_version)

    def intake_hold(self) -> list:
        """Holds direct writes (around a cut) once those in progress are stored; their receipts."""
        return [] if self.intake is None else self.intake[0].hold()

    def intake_release(self) -> None:
        """Lets direct writes in again."""
        if self.intake is not None:
            self.intake[0].release()


def remote_shard(
    run_name: str,
    shard_id: int,
    capacity: int,
    *,
    sampler: str = "uniform",
    seed: int = 0,
    num_cpus: float = 0.5,
    max_restarts: int = 0,
    alpha: float = 0.6,
    fifo_shuffle: bool = False,
    fifo_queue: bool = False,
    mmap_dir: str | None = None,
    frame_stack: int = 0,
    scheduling_strategy=None,
    deterministic: bool = False,
    run_seed: int = 0,
) -> ray.actor.ActorHandle:
    """Starts a named ReplayShard actor ``<run>.replay-<i>`` in namespace ``relayrl``.

    ``run_name`` is the run id; ``scheduling_strategy`` (e.g. a bundle of the run's placement
    group) defaults to Ray's.
    """
    actor_cls = ray.remote(ReplayShard).options(
        name=f"{run_name}.replay-{shard_id}",
        namespace="relayrl",
        num_cpus=num_cpus,
        max_restarts=max_restarts,
        max_concurrency=1,
        scheduling_strategy=scheduling_strategy,
    )
    return actor_cls.remote(
        shard_id,
        capacity,
        sampler,
        seed,
        alpha=alpha,
        fifo_shuffle=fifo_shuffle,
        fifo_queue=fifo_queue,
        mmap_dir=mmap_dir,
        frame_stack=frame_stack,
        deterministic=deterministic,
        run_seed=run_seed,
    )


def remote_shards(
    run_name: str,
    config: ReplayConfig,
    *,
    seed: int = 0,
    max_restarts: int | None = None,
    scheduling: Sequence | None = None,
    deterministic: bool = False,
) -> list[ray.actor.ActorHandle]:
    """Starts the ``config.num_shards`` shards of a run (shard ``i`` seeded ``seed * 100 + i``).

    ``max_restarts`` defaults to ``config.max_restarts``; ``deterministic`` stages writes and
    updates until each commit (``replay.staging``).

    ``scheduling`` holds one scheduling strategy per shard (None entries: Ray's default).
    """
    scheduling = list(scheduling) if scheduling is not None else [None] * config.num_shards
    return [
        remote_shard(
            run_name,
            i,
            config.shard_capacity,
            sampler=config.sampler,
            seed=seed * 100 + i,
            num_cpus=config.num_cpus,
            max_restarts=config.max_restarts if max_restarts is None else max_restarts,
            alpha=config.alpha,
            fifo_shuffle=config.fifo_shuffle,
            fifo_queue=config.fifo_queue,
            mmap_dir=config.mmap_dir if config.storage == "mmap" else None,
            frame_stack=config.frame_ring,
            scheduling_strategy=scheduling[i],
            deterministic=deterministic,
            run_seed=seed,
        )
        for i in range(config.num_shards)
    ]
