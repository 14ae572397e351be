"""The replay client: routes writes to shards, samples across them, prefetches, routes updates."""

from __future__ import annotations

import collections
import logging
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import ray

from replay.receipts import WriteReceipt
from replay.samplers import EmptyReplayError, importance_weights
from replay.sharding import PendingSample, fifo_split, shares_of, split_group
from replay.storage import Batch

logger = logging.getLogger(__name__)

# What a call to a dead, restarting or unreachable shard raises.
SHARD_FAILURES = (ray.exceptions.RayActorError,)


class ShardUnavailableError(RuntimeError):
    """A service-wide call (dump, load) could not reach a shard; the message names it."""


class ReplayClient:
    """Client of a sharded replay service, usable from the driver, collectors and learners.

    Writes go to one shard chosen by the writer (``shard=`` or a hash of ``writer_id``), so each
    writer's sequence numbers are checked by one shard.

    A sample asks every shard at once for its part of the batch: a multinomial split in proportion
    to the shards' sizes (uniform) or priority masses (prioritized) as of their last replies, or,
    for FIFO, the items left in each shard's pass, so that the shards' passes end together (a
    new pass is split by the sizes the shards report when it starts; what they store later
    joins the pass after). Every reply refreshes that shard's figures.
    Prioritized batches carry ``"weight"``: importance weights of the probability with which each
    item was actually drawn (shard share times in-shard probability), normalized by the smallest
    such probability over the whole service.

    Shard faults: a shard whose call fails because it died, is restarting or cannot be reached
    is marked down and sampled around: its share of the request is drawn again from the live
    shards (uniform, prioritized; a FIFO batch comes back short), its pending priority updates
    are dropped (its items are gone), and a cheap ``info`` probe, sent at most every
    ``probe_interval_s``, brings it back once Ray has restarted it. While every shard is down or
    empty after a fault, sampling waits up to ``unavailable_timeout_s`` for items.

    Keyword Args:
        seed: Seed of the split generator.
        beta: Default importance-weight exponent when :meth:`sample` is given none.
        probe_interval_s: Seconds between probes of a shard that is down.
        unavailable_timeout_s: Longest wait for items while shards are down.

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
        if not shards:
            raise ValueError("a replay client needs at least one shard")
        self.shards = list(shards)
        self.rng = np.random.default_rng(seed)
        self.beta = beta
        self.infos: list[dict] = [{"size": 0} for _ in self.shards]
        self.queue_size: int | None = None
        self.ready: collections.deque[tuple[dict, float]] = collections.deque()
        self.inflight: collections.deque[PendingSample] = collections.deque()
        self.deferred: list[list[tuple[np.ndarray, ...]]] = [[] for _ in self.shards]
        self.update_refs: list[list[ray.ObjectRef]] = [[] for _ in self.shards]
        self.fifo_inflight = np.zeros(len(self.shards), dtype=np.int64)
        self.probe_interval_s = probe_interval_s
        self.unavailable_timeout_s = unavailable_timeout_s
        self.down: dict[int, tuple[ray.ObjectRef | None, float]] = {}  # shard: (probe, sent at)
        self.faults = 0  # shard failures seen by this client

    # -- shard faults ------------------------------------------------------------------------
    def mark_down(self, shard: int, error: BaseException) -> None:
        """Stops routing samples and updates to ``shard`` until a probe finds it back."""
        if shard not in self.down:
            self.faults += 1
            logger.warning("replay-%d unavailable, sampling around it: %s", shard, error)
        self.down[shard] = (None, 0.0)
        self.infos[shard] = {**self.infos[shard], "size": 0, "mass": 0.0, "remaining": 0}
        self.deferred[shard] = []
        self.update_refs[shard] = []
        self.fifo_inflight[shard] = 0

    def probe(self) -> list[int]:
        """Checks the shards that are down without blocking; returns those that came back."""
        back = []
        now = time.monotonic()
        for shard, (ref, sent) in list(self.down.items()):
            if ref is not None and ray.wait([ref], timeout=0)[0]:
                try:
                    self.infos[shard] = ray.get(ref)
                except SHARD_FAILURES:
                    ref = None
                else:
                    del self.down[shard]
                    back.append(shard)
                    logger.info("replay-%d is back (%d items)", shard, self.infos[shard]["size"])
                    continue
            if ref is None and now - sent >= self.probe_interval_s:
                self.down[shard] = (self.shards[shard].info.remote(), now)
            elif ref is None:
                self.down[shard] = (None, sent)
        return back

    def revive(self, timeout: float) -> list[int]:
        """Asks every shard that is down, and waits; returns those that answered (now live)."""
        refs = {shard: self.shards[shard].info.remote() for shard in self.down}
        back = []
        for shard, ref in refs.items():
            try:
                self.infos[shard] = ray.get(ref, timeout=timeout)
            except (*SHARD_FAILURES, ray.exceptions.GetTimeoutError):
                continue
            del self.down[shard]
            back.append(shard)
        return back

    def _get(self, shard: int, ref: ray.ObjectRef, timeout: float | None = None):
        """``ray.get`` of one shard's reply, or None.

        None when it failed (the shard is marked down) or gave no reply within ``timeout``
        seconds (a stuck shard is the driver's to handle).
        """
        try:
            return ray.get(ref, timeout=timeout)
        except SHARD_FAILURES as err:
            self.mark_down(shard, err)
            return None
        except ray.exceptions.GetTimeoutError:
            return None

    def _wait_for_items(self) -> None:
        """Waits while every shard is down or empty after a fault (see the class docstring).

        Raises:
            EmptyReplayError: If the shards are empty and none was lost, or none comes back
                with items within ``unavailable_timeout_s``.
        """
        deadline = time.monotonic() + self.unavailable_timeout_s
        while True:
            self.refresh()
            if self.sizes.sum() > 0:
                return
            if not self.faults or time.monotonic() >= deadline:
                down = ", ".join(f"replay-{i}" for i in sorted(self.down)) or "none"
                raise EmptyReplayError(f"cannot sample: every replay shard is empty (down: {down})")
            probes = [ref for ref, _ in self.down.values() if ref is not None]
            ray.wait(probes or [self.shards[0].info.remote()], timeout=self.probe_interval_s)

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
    @property
    def sizes(self) -> np.ndarray:
        """Each shard's size as of its last reply."""
        return np.array([info["size"] for info in self.infos], dtype=np.int64)

    def refresh(self) -> list[dict]:
        """Asks every live shard for its size and masses now (probes the ones that are down)."""
        self.probe()
        refs = {i: s.info.remote() for i, s in enumerate(self.shards) if i not in self.down}
        for i, ref in refs.items():
            info = self._get(i, ref)
            if info is not None:
                self.infos[i] = info
        return self.infos

    def refresh_sizes(self) -> np.ndarray:
        """Asks every shard for its size."""
        self.refresh()
        return self.sizes

    def split(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(counts, shares)``: items asked of each shard and each draw's shard probabilities.

        Raises:
            EmptyReplayError: If every shard is empty (after asking them).
        """
        if self.down:
            self.probe()
        if self.sizes.sum() == 0:
            self._wait_for_items()
        if self._sampler() == "fifo":
            remaining = sum(info.get("remaining", 0) for info in self.infos)
            if remaining < batch_size and not self.fifo_inflight.any():
                self.refresh()  # a new pass starts: split it by the shards' sizes now
            counts = fifo_split(batch_size, self.infos, self.fifo_inflight)
            self.fifo_inflight += counts
            return counts, counts / max(batch_size, 1)
        shares = shares_of(self.infos)
        return self.rng.multinomial(batch_size, shares), shares

    def _sampler(self) -> str | None:
        return next((info["sampler"] for info in self.infos if "sampler" in info), None)

    def sample_async(self, batch_size: int, *, num_batches: int = 1) -> PendingSample:
        """Sends one request to every shard (with any deferred priority updates).

        Args:
            batch_size: Items per batch.
            num_batches: Batches fetched by this one request (see :meth:`sample`'s prefetch).
        """
        counts, shares = self.split(batch_size * num_batches)
        refs = [
            None if i in self.down else shard.sample.remote(int(n), self._take_deferred(i))
            for i, (shard, n) in enumerate(zip(self.shards, counts, strict=True))
        ]
        return PendingSample(batch_size, num_batches, counts, shares, refs)

    def _receive(self, pending: PendingSample) -> tuple[dict[str, np.ndarray], float]:
        """Waits for a request's replies: ``(concatenated batch, smallest draw probability)``.

        A shard that fails to answer is marked down and its part is drawn again from the live
        shards (uniform and prioritized samplers), so the batch keeps its size.
        """
        replies = [None if ref is None else self._get(i, ref) for i, ref in enumerate(pending.refs)]
        missing = sum(int(n) for n, reply in zip(pending.counts, replies, strict=True) if not reply)
        parts, minima = [], [np.inf]
        extra = None
        if missing and self._sampler() != "fifo":
            extra = self._receive(self.sample_async(missing))
        for shard, reply in enumerate(replies):
            if reply is None:
                continue
            part, info = reply
            self.infos[shard] = info
            if info["sampler"] == "fifo":
                self.fifo_inflight[shard] -= pending.counts[shard]
            if info["sampler"] == "prioritized" and info["size"] and pending.shares[shard] > 0:
                minima.append(pending.shares[shard] * info["min_mass"] / info["mass"])
            if part:
                part["shard"] = np.full(len(part["index"]), shard, dtype=np.int64)
                if "probability" in part:
                    part["probability"] = part["probability"] * pending.shares[shard]
                parts.append(part)
        if extra is not None and extra[0]:
            parts.append(extra[0])
            minima.append(extra[1])
        if not parts:
            return {}, np.inf
        batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        if "fifo_pass" in batch:  # a fetch that crosses a pass boundary: passes in order
            order = np.argsort(batch["fifo_pass"], kind="stable")
            batch = {k: v[order] for k, v in batch.items()}
        return batch, min(minima)

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
        return self._weigh(*self._receive(pending), beta)

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
        if self.queue_size != batch_size and (self.ready or self.inflight):
            if self.infos[0].get("sampler") == "fifo":
                raise ValueError(
                    f"fifo: batches of size {self.queue_size} are queued; sample that size or "
                    "cancel_prefetch()"
                )
            self.cancel_prefetch()
        self.queue_size = batch_size
        ahead = len(self.ready) + sum(p.num_batches for p in self.inflight)
        if ahead == 0 or ahead - 1 < prefetch:
            self.inflight.append(self.sample_async(batch_size, num_batches=prefetch + (ahead == 0)))
        if not self.ready:
            pending = self.inflight.popleft()
            batch, min_probability = self._receive(pending)
            shuffle = None if self.infos[0].get("sampler") == "fifo" else self.rng
            parts = split_group(batch, pending.num_batches, shuffle)
            self.ready.extend((part, min_probability) for part in parts)
        return self._weigh(*self.ready.popleft(), beta)

    def cancel_prefetch(self) -> int:
        """Drops the queued batches; returns how many (their FIFO items are lost)."""
        dropped = len(self.ready) + sum(p.num_batches for p in self.inflight)
        for pending in self.inflight:
            self._receive(pending)  # their replies carry fresher shard figures
        self.ready.clear()
        self.inflight.clear()
        self.queue_size = None
        return dropped

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
        shard_of = np.asarray(keys["shard"], dtype=np.int64)
        columns = (
            np.asarray(keys["index"], dtype=np.int64),
            np.asarray(keys["insertion_id"], dtype=np.int64),
            np.asarray(priorities, dtype=np.float64).reshape(-1),
        )
        if not len(shard_of) == len(columns[2]):
            raise ValueError(f"{len(columns[2])} priorities for {len(shard_of)} items")
        for shard in np.unique(shard_of):
            mask = shard_of == shard
            self.deferred[shard].append(tuple(c[mask] for c in columns))
        if not defer:
            self._send_updates(force=False)

    def _take_deferred(self, shard: int) -> tuple[np.ndarray, ...] | None:
        updates, self.deferred[shard] = self.deferred[shard], []
        if not updates:
            return None
        return tuple(np.concatenate(c) for c in zip(*updates, strict=True))

    def _send_updates(self, *, force: bool) -> None:
        for shard, handle in enumerate(self.shards):
            if shard in self.down:
                continue
            refs = self.update_refs[shard]
            if refs:
                done, refs = ray.wait(refs, num_returns=len(refs), timeout=0)
                self.update_refs[shard] = refs
                for ref in done:  # surfaces a shard's refusal
                    self._get(shard, ref)
                if shard in self.down:
                    continue
            if self.deferred[shard] and (force or not refs):
                refs.append(handle.update_priorities.remote(*self._take_deferred(shard)))

    def flush_updates(self, *, wait: bool = False) -> None:
        """Sends every held priority update; with ``wait``, until all are applied.

        Raises:
            ValueError: If a shard refused an update (e.g. a negative priority).
        """
        self._send_updates(force=True)
        if wait:
            pending, self.update_refs = self.update_refs, [[] for _ in self.shards]
            for shard, refs in enumerate(pending):
                for ref in refs:
                    self._get(shard, ref)  # a shard lost meanwhile lost its items too

    # -- service-wide ------------------------------------------------------------------------
    def _each(self, method: str, *args_per_shard, timeout: float = 600.0) -> list:
        """Calls ``method`` on every shard in parallel; the replies in shard order.

        Raises:
            ShardUnavailableError: Naming the first shard that did not answer (died, or gave
                no reply within ``timeout`` seconds).
        """
        refs = [
            getattr(s, method).remote(*(a[i] for a in args_per_shard))
            for i, s in enumerate(self.shards)
        ]
        replies = []
        deadline = time.monotonic() + timeout
        for i, ref in enumerate(refs):
            try:
                replies.append(ray.get(ref, timeout=max(deadline - time.monotonic(), 0.001)))
            except (*SHARD_FAILURES, ray.exceptions.GetTimeoutError) as err:
                self.mark_down(i, err)
                message = f"replay-{i} is unavailable for {method}: {err}"
                raise ShardUnavailableError(message) from err
        return replies

    def stats(self, timeout: float = 2.0) -> list[dict]:
        """The size and counters of the shards that answer within ``timeout`` seconds.

        One that is down or stuck is left out.
        """
        refs = {i: s.stats.remote() for i, s in enumerate(self.shards) if i not in self.down}
        deadline = time.monotonic() + timeout
        replies = [
            self._get(i, ref, timeout=max(deadline - time.monotonic(), 0.001))
            for i, ref in refs.items()
        ]
        return [reply for reply in replies if reply is not None]

    def clear(self) -> int:
        """Every shard drops its items (on-policy iteration boundary); returns how many.

        Prefetched batches are dropped too (they would be stale).
        """
        self.ready.clear()
        self.inflight.clear()
        self.queue_size = None
        self.fifo_inflight[:] = 0
        refs = {i: s.clear.remote() for i, s in enumerate(self.shards)}
        # A shard that is down holds nothing; a stuck one is killed and restarted empty.
        dropped = sum(self._get(i, ref, timeout=60.0) or 0 for i, ref in refs.items())
        self.infos = [{**info, "size": 0, "remaining": 0} for info in self.infos]
        return dropped

    def dump(self, directory: str | Path) -> list[dict]:
        """Every shard writes its table into ``directory/replay-<i>`` in parallel.

        Priority updates are flushed and applied first. Returns each shard's file sizes.

        Raises:
            ShardUnavailableError: Naming a shard that is down (the dump is incomplete).
        """
        self.flush_updates(wait=True)
        if self.down:
            names = ", ".join(f"replay-{i}" for i in sorted(self.down))
            raise ShardUnavailableError(f"cannot dump the replay service: {names} down")
        paths = [str(Path(directory) / f"replay-{i}") for i in range(len(self.shards))]
        return self._each("dump", paths)

    def load(self, directory: str | Path) -> list[dict]:
        """Every shard restores its table from ``directory/replay-<i>`` in parallel.

        Prefetched batches and deferred updates are dropped. Each shard takes the capacity and
        sampler of its checkpoint. A shard that refuses its files keeps its current table while
        the others load theirs (verify a checkpoint before loading it). Returns each shard's
        stats.

        Raises:
            replay.npyio.CheckpointError: Naming a missing, truncated or corrupt file.
            ShardUnavailableError: Naming a shard that did not answer.
        """
        self.ready.clear()
        self.inflight.clear()
        self.queue_size = None
        self.deferred = [[] for _ in self.shards]
        self.flush_updates(wait=True)
        self.fifo_inflight[:] = 0
        paths = [str(Path(directory) / f"replay-{i}") for i in range(len(self.shards))]
        stats = self._each("load", paths)
        self.refresh()
        return stats
