"""The replay client: routes writes to shards, samples across them, prefetches, routes updates.

:class:`ReplayClient` composes the jobs, each in its own module: ``replay.health`` (each shard's
figures, marking a shard down, probing it back), ``replay.sampling.fetch`` (the split of a sample
across shards, its concurrent fetch and prefetch), ``replay.sampling.priorities`` (priority updates
held, sent, flushed); writes and the service-wide calls (stats, clear, dump, load) are here.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import ray

from replay.health import ShardUnavailableError, ShardView, shard_names
from replay.persist.elastic import load_resharded, move_items
from replay.persist.reshard import checkpoint_shards
from replay.receipts import WriteReceipt
from replay.sampling.fetch import SampleFetcher
from replay.sampling.priorities import PriorityRouter
from replay.sampling.samplers import importance_weights
from replay.sampling.sharding import PendingSample
from replay.storage import Batch


class ReplayClient:
    """Client of a sharded replay service, usable from the driver, collectors and learners.

    Writes go to one shard chosen by the writer (``shard=`` or a hash of ``writer_id``), so each
    writer's sequence numbers are checked by one shard.

    A sample asks every shard at once for its part of the batch, split in proportion to the
    shards' sizes (uniform), priority masses (prioritized) or what is left of their passes
    (FIFO) as of their last replies (``replay.sampling.fetch``). Prioritized batches carry
    ``"weight"``: importance weights of the probability with which each item was actually drawn
    (shard share times in-shard probability), normalized by the smallest such probability over the
    whole service.

    Shard faults: a shard whose call fails because it died, is restarting or cannot be reached
    is marked down and sampled around: its share of the request is drawn again from the live
    shards (uniform, prioritized; a FIFO batch comes back short), its pending priority updates
    are dropped (its items are gone), and a cheap ``info`` probe, sent at most every
    ``probe_interval_s``, brings it back once Ray has restarted it. While every shard is down or
    empty after a fault, sampling waits up to ``unavailable_timeout_s`` for items.

    Args:
        shards: The shard actors, in shard order.

    Keyword Args:
        seed: Seed of the split generator.
        beta: Default importance-weight exponent when :meth:`sample` is given none.
        probe_interval_s: Seconds between probes of a shard that is down.
        unavailable_timeout_s: Longest wait for items while shards are down.

    Attributes:
        shards: The shard actors, in shard order.
        beta: Default importance-weight exponent (learners anneal it).
        view: :class:`replay.health.ShardView`: each shard's figures, the ones that are down.
        updates: :class:`replay.sampling.priorities.PriorityRouter`: held and in-flight priority
            updates.
        fetcher: :class:`replay.sampling.fetch.SampleFetcher`: sample requests and the prefetch
            queue.

    Examples:
        >>> client = ReplayClient(shards)  # doctest: +SKIP
        >>> receipt = client.write(batch, writer_id="collector-0", seq=0)  # doctest: +SKIP
        >>> batch = client.sample(256, beta=0.5, prefetch=2)  # doctest: +SKIP
        >>> client.update_priorities(batch, td_errors)  # doctest: +SKIP
    """

    def __init__(
        self,
        shards: Sequence[ray.actor.ActorHandle],
        *,
        seed: int | None = None,
        beta: float = 1.0,
        probe_interval_s: float = 0.5,
        unavailable_timeout_s: float = 120.0,
    ) -> None:
        self.seed = seed
        self.beta = beta
        self.probe_interval_s = probe_interval_s
        self.unavailable_timeout_s = unavailable_timeout_s
        self._connect(shards, np.random.default_rng(seed))

    def _connect(self, shards: Sequence[ray.actor.ActorHandle], rng: np.random.Generator) -> None:
        if not shards:
            raise ValueError("a replay client needs at least one shard")
        self.shards = list(shards)
        self.view = ShardView(
            self.shards, probe_interval_s=self.probe_interval_s, on_down=self._forget
        )
        self.updates = PriorityRouter(self.shards, self.view)
        self.fetcher = SampleFetcher(
            self.shards,
            self.view,
            self.updates,
            rng=rng,
            unavailable_timeout_s=self.unavailable_timeout_s,
        )

    # -- what callers read -------------------------------------------------------------------
    @property
    def rng(self) -> np.random.Generator:
        """The split generator (learners also shuffle with it and checkpoint its state)."""
        return self.fetcher.rng

    @property
    def infos(self) -> list[dict]:
        """Each shard's ``info`` as of its last reply."""
        return self.view.infos

    @property
    def sizes(self) -> np.ndarray:
        """Each shard's size as of its last reply."""
        return self.view.sizes

    # -- shard faults ------------------------------------------------------------------------
    def mark_down(self, shard: int, error: BaseException) -> None:
        """Stops routing samples and updates to ``shard`` until a probe finds it back."""
        self.view.mark_down(shard, error)

    def _forget(self, shard: int) -> None:
        """Drops what this client holds for a shard that went down (its items are gone)."""
        self.updates.drop(shard)
        self.fetcher.fifo_inflight[shard] = 0

    def probe(self) -> list[int]:
        """Checks the shards that are down without blocking; returns those that came back."""
        return self.view.probe()

    def revive(self, timeout: float) -> list[int]:
        """Asks every shard that is down, and waits; returns those that answered (now live)."""
        return self.view.revive(timeout)

    # -- writes ------------------------------------------------------------------------------
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

    # -- sampling ----------------------------------------------------------------------------
    def refresh(self) -> list[dict]:
        """Asks every live shard for its size and masses now (probes the ones that are down)."""
        return self.view.refresh()

    def refresh_sizes(self) -> np.ndarray:
        """Asks every shard for its size."""
        self.refresh()
        return self.sizes

    def split(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(counts, shares)``: items asked of each shard and each draw's shard probabilities.

        Raises:
            EmptyReplayError: If every shard is empty (after asking them).
        """
        return self.fetcher.split(batch_size)

    def sample_async(self, batch_size: int, *, num_batches: int = 1) -> PendingSample:
        """Sends one request to every shard (with any deferred priority updates).

        Args:
            batch_size: Items per batch.
            num_batches: Batches fetched by this one request (see :meth:`sample`'s prefetch).
        """
        return self.fetcher.send(batch_size, num_batches=num_batches)

    def _weigh(self, batch: dict, min_probability: float, beta: float | None) -> dict:
        if "probability" in batch:
            beta = self.beta if beta is None else beta
            batch["weight"] = importance_weights(batch["probability"], min_probability, beta)
        return batch

    def collect(
        self, pending: PendingSample, *, beta: float | None = None
    ) -> dict[str, np.ndarray]:
        """Waits for the replies of :meth:`sample_async` and concatenates them.

        Returns:
            The stored keys plus ``"shard"``, ``"index"`` and ``"insertion_id"`` (the key of a
            priority update); prioritized tables add ``"probability"`` (of each draw, over the
            whole service) and ``"weight"`` (importance weights with exponent ``beta``, default
            ``self.beta``).
        """
        return self._weigh(*self.fetcher.receive(pending), beta)

    def sample(
        self, batch_size: int, *, beta: float | None = None, prefetch: int = 0
    ) -> dict[str, np.ndarray]:
        """Samples ``batch_size`` transitions across shards (see :meth:`collect` for the keys).

        With ``prefetch=k``, at least ``k`` further batches of the same size stay requested or
        received beyond the one returned, so they travel while the caller trains; they are
        fetched ``k`` at a time, one call per shard, which spreads the cost of a call over ``k``
        batches. The batches of one fetch are i.i.d. draws from the same shard states (as are
        any prefetched batches); their importance weights use the ``beta`` of the call that
        returns them. Batches of another size still queued are discarded (uniform,
        prioritized) or refused (FIFO, whose items must not be lost).

        Raises:
            EmptyReplayError: If every shard is empty.
            ValueError: FIFO only: batches of another size are queued.
        """
        return self._weigh(*self.fetcher.next(batch_size, prefetch), beta)

    def set_stream(self, key: tuple[int, ...] | None) -> None:
        """Names the following sample requests ``(*key, n)`` (None: the shards' own generators).

        Deterministic runs name each request by what asks (a rank and its model version), so
        a shard draws it from its own stream (``replay.sampling.streams``) whenever it arrives.
        """
        self.fetcher.stream = None if key is None else tuple(int(k) for k in key)
        self.fetcher.stream_requests = 0

    def cancel_prefetch(self) -> int:
        """Drops the queued batches; returns how many (their FIFO items are lost)."""
        return self.fetcher.cancel()

    # -- priorities --------------------------------------------------------------------------
    def update_priorities(
        self, keys: Mapping[str, np.ndarray], priorities: np.ndarray, *, defer: bool = False
    ) -> None:
        """Routes new priorities of sampled items to their shards, without waiting.

        Each shard gets the updates in one call, unless its previous update call is still in
        flight: then they wait in the client and go together with later ones (in the next
        update call, the next sample request, or :meth:`flush_updates`). Updates from one client
        reach each shard in order, before that client's later samples. An item overwritten
        since it was sampled keeps its successor's priority (the shard drops the update).

        Args:
            keys: A sampled batch, or any mapping with its ``"shard"``, ``"index"`` and
                ``"insertion_id"`` arrays.
            priorities: One non-negative priority per item (e.g. ``|td_error| + eps``).
            defer: Hold the updates in the client until the next sample request carries them
                (no extra call) or :meth:`flush_updates`.

        Raises:
            ValueError: If the lengths differ, or a shard refused an earlier update (e.g. a
                negative priority).
        """
        self.updates.held.add(keys, priorities)
        if not defer:
            self.updates.send(force=False)

    def flush_updates(self, *, wait: bool = False) -> None:
        """Sends every held priority update; with ``wait``, until all are applied.

        Raises:
            ValueError: If a shard refused an update (e.g. a negative priority).
        """
        self.updates.flush(wait=wait)

    # -- service-wide ------------------------------------------------------------------------
    def stats(self, timeout: float = 2.0) -> list[dict]:
        """The size and counters of the shards that answer within ``timeout`` seconds.

        One that is down or stuck is left out.
        """
        return self.view.gather("stats", timeout)

    def clear(self) -> int:
        """Every shard drops its items (on-policy iteration boundary); returns how many.

        Prefetched batches are dropped too (they would be stale).
        """
        self.fetcher.reset()
        refs = {i: s.clear.remote() for i, s in enumerate(self.shards)}
        # A shard that is down holds nothing; a stuck one is killed and restarted empty.
        dropped = sum(self.view.get(i, ref, timeout=60.0) or 0 for i, ref in refs.items())
        self.view.infos = [{**info, "size": 0, "remaining": 0} for info in self.view.infos]
        return dropped

    def dump(self, directory: str | Path) -> list[dict]:
        """Every shard writes its table into ``directory/replay-<i>`` in parallel.

        Priority updates are flushed and applied first. Returns each shard's file sizes.

        Raises:
            ShardUnavailableError: Naming a shard that is down (the dump is incomplete).
        """
        self.flush_updates(wait=True)
        if self.view.down:
            names = shard_names(self.view.down)
            raise ShardUnavailableError(f"cannot dump the replay service: {names} down")
        paths = [str(Path(directory) / f"replay-{i}") for i in range(len(self.shards))]
        return self.view.each("dump", paths)

    def load(self, directory: str | Path) -> list[dict]:
        """Every shard restores its table from ``directory/replay-<i>`` in parallel.

        Prefetched batches and deferred updates are dropped. Each shard takes the capacity and
        sampler of its checkpoint. A shard that refuses its files keeps its current table while
        the others load theirs (verify a checkpoint before loading it). Returns each shard's
        stats.

        A checkpoint of another number of shards is re-sharded first (``replay.persist.reshard``:
        every item into exactly one shard, with its priority, counters' sums kept) into a hidden
        sibling directory ``.reshard-<name>-<shards>`` (removed afterwards); each shard then
        keeps its current capacity and gets a seed derived from the client's seed and its index.

        Raises:
            replay.persist.npyio.CheckpointError: Naming a missing, truncated or corrupt file.
            ShardUnavailableError: Naming a shard that did not answer.
            ValueError: Re-sharding a frame-deduplicated replay (``replay.frame_stack > 0``).
        """
        directory = Path(directory)
        self.fetcher.queue.clear()
        self.updates.held.clear()
        self.flush_updates(wait=True)
        self.fetcher.fifo_inflight[:] = 0
        num_old, num_new = checkpoint_shards(directory), len(self.shards)
        if num_old in (0, num_new):
            paths = [str(directory / f"replay-{i}") for i in range(num_new)]
            stats = self.view.each("load", paths)
        else:
            stats = load_resharded(self.view, directory, num_old, seed=self.seed)
        self.refresh()
        return stats

    # -- elastic shards ----------------------------------------------------------------------
    def set_shards(self, shards: Sequence[ray.actor.ActorHandle]) -> None:
        """Switches this client to a new list of shards (added or removed ones).

        Held priority updates are sent and applied first; prefetched batches are dropped (their
        FIFO items are lost); the split generator keeps its state. Batches sampled before the
        switch name shards by their old positions: do not send their priority updates after it.
        """
        self.flush_updates(wait=True)
        rng, stream, requests = self.fetcher.rng, self.fetcher.stream, self.fetcher.stream_requests
        self.fetcher.queue.clear()
        self._connect(shards, rng)
        self.fetcher.stream, self.fetcher.stream_requests = stream, requests
        self.refresh()

    def add_shards(self, shards: Sequence[ray.actor.ActorHandle]) -> None:
        """Appends new (empty) shards: they take writes at once (see :meth:`set_shards`)."""
        self.set_shards(self.shards + list(shards))

    def remove_shards(self, indices: Sequence[int]) -> int:
        """Drains the named shards into the others, then stops using them; returns items moved.

        Their items are dealt over the remaining shards' free capacity (``replay.persist.reshard.
        partition``; the oldest that find no room are dropped and logged), then the client
        switches to the remaining shards (:meth:`set_shards`); the caller kills the removed
        actors. Writers must have stopped writing to the removed shards first.

        Raises:
            ValueError: If an index is out of range or no shard would remain.
        """
        gone = sorted(set(int(i) for i in indices))
        keep = [i for i in range(len(self.shards)) if i not in gone]
        if not keep or any(not 0 <= i < len(self.shards) for i in gone):
            raise ValueError(f"remove_shards: {gone} of {len(self.shards)} shards")
        self.flush_updates(wait=True)
        moved = move_items(self.view, gone, keep)
        self.set_shards([self.shards[i] for i in keep])
        return moved
