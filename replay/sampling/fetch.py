"""Sampling across shards: split a request, ask every shard at once, assemble, keep batches ahead.

A sample asks every shard at once for its part of the batch: a multinomial split in proportion
to the shards' sizes (uniform) or priority masses (prioritized) as of their last replies, or,
for FIFO, the items left in each shard's pass, so that the shards' passes end together (a new
pass is split by the sizes the shards report when it starts; what they store later joins the
pass after). Every reply refreshes that shard's figures. A shard that fails to answer is marked
down and its part is drawn again from the live shards (uniform, prioritized; a FIFO batch comes
back short).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import ray

from replay.health import ShardView, shard_names
from replay.sampling.prefetch import PrefetchQueue
from replay.sampling.priorities import PriorityRouter
from replay.sampling.samplers import EmptyReplayError
from replay.sampling.sharding import PendingSample, fifo_split, merge_replies, shares_of


class SampleFetcher:
    """Requests each sample's parts from the shards, assembles them, and prefetches.

    Args:
        shards: The shard actors, in shard order.
        view: The client's view of the shards.
        updates: The client's priority updates (held ones ride on sample requests).

    Keyword Args:
        rng: Generator of the split and of the shuffle of prefetched groups.
        unavailable_timeout_s: Longest wait for items while shards are down.

    Attributes:
        fifo_inflight: FIFO items requested of each shard and not received yet.
        queue: The batches kept ahead of the caller.
        stream: None, or the key that names this client's requests (deterministic runs): the
            ``n``-th request since it was set asks each shard to draw from the stream
            ``(*stream, n)`` (``ReplayShard.sample``).
    """

    def __init__(
        self,
        shards: Sequence[ray.actor.ActorHandle],
        view: ShardView,
        updates: PriorityRouter,
        *,
        rng: np.random.Generator,
        unavailable_timeout_s: float = 120.0,
    ) -> None:
        self.shards = list(shards)
        self.view = view
        self.updates = updates
        self.rng = rng
        self.unavailable_timeout_s = unavailable_timeout_s
        self.fifo_inflight = np.zeros(len(self.shards), dtype=np.int64)
        self.queue = PrefetchQueue()
        self.stream: tuple[int, ...] | None = None
        self.stream_requests = 0

    def wait_for_items(self) -> None:
        """Waits while every shard is down or empty after a fault.

        Raises:
            EmptyReplayError: If the shards are empty and none was lost, or none comes back
                with items within ``unavailable_timeout_s``.
        """
        deadline = time.monotonic() + self.unavailable_timeout_s
        while True:
            self.view.refresh()
            if self.view.sizes.sum() > 0:
                return
            if not self.view.faults or time.monotonic() >= deadline:
                down = shard_names(self.view.down)
                raise EmptyReplayError(f"cannot sample: every replay shard is empty (down: {down})")
            self.view.wait()

    def split(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(counts, shares)``: items asked of each shard and each draw's shard probabilities.

        Raises:
            EmptyReplayError: If every shard is empty (after asking them).
        """
        view = self.view
        if view.down:
            view.probe()
        if view.sizes.sum() == 0:
            self.wait_for_items()
        if view.sampler() == "fifo":
            remaining = sum(info.get("remaining", 0) for info in view.infos)
            if remaining < batch_size and not self.fifo_inflight.any():
                view.refresh()  # a new pass starts: split it by the shards' sizes now
            counts = fifo_split(batch_size, view.infos, self.fifo_inflight)
            self.fifo_inflight += counts
            return counts, counts / max(batch_size, 1)
        shares = shares_of(view.infos)
        return self.rng.multinomial(batch_size, shares), shares

    def send(self, batch_size: int, *, num_batches: int = 1) -> PendingSample:
        """Sends one request to every live shard (with its held priority updates)."""
        counts, shares = self.split(batch_size * num_batches)
        key = ()
        if self.stream is not None:
            key = ((*self.stream, self.stream_requests),)
            self.stream_requests += 1
        refs = [
            None
            if i in self.view.down
            else shard.sample.remote(int(n), self.updates.held.take(i), *key)
            for i, (shard, n) in enumerate(zip(self.shards, counts, strict=True))
        ]
        return PendingSample(batch_size, num_batches, counts, shares, refs)

    def receive(self, pending: PendingSample) -> tuple[dict[str, np.ndarray], float]:
        """Waits for a request's replies: ``(concatenated batch, smallest draw probability)``.

        A shard that fails to answer is marked down and its part is drawn again from the live
        shards (uniform and prioritized samplers), so the batch keeps its size.
        """
        replies = [
            None if ref is None else self.view.get(i, ref) for i, ref in enumerate(pending.refs)
        ]
        missing = sum(int(n) for n, reply in zip(pending.counts, replies, strict=True) if not reply)
        extra = None
        if missing and self.view.sampler() != "fifo":
            extra = self.receive(self.send(missing))
        for shard, reply in enumerate(replies):
            if reply is not None:
                self.view.infos[shard] = reply[1]
                if reply[1]["sampler"] == "fifo":
                    self.fifo_inflight[shard] -= pending.counts[shard]
        return merge_replies(replies, pending.shares, extra)

    def next(self, batch_size: int, prefetch: int) -> tuple[dict[str, np.ndarray], float]:
        """The next batch and its fetch's smallest draw probability (see ``ReplayClient.sample``).

        Raises:
            EmptyReplayError: If every shard is empty.
            ValueError: FIFO only: batches of another size are queued.
        """
        queue = self.queue
        if queue.holds_other(batch_size):
            if self.view.infos[0].get("sampler") == "fifo":
                raise ValueError(
                    f"fifo: batches of size {queue.batch_size} are queued; sample that size or "
                    "cancel_prefetch()"
                )
            self.cancel()
        queue.batch_size = batch_size
        wanted = queue.to_request(prefetch)
        if wanted:
            queue.inflight.append(self.send(batch_size, num_batches=wanted))
        if not queue.ready:
            pending = queue.inflight.popleft()
            batch, min_probability = self.receive(pending)
            shuffle = None if self.view.infos[0].get("sampler") == "fifo" else self.rng
            queue.unpack(batch, min_probability, pending.num_batches, shuffle)
        return queue.pop()

    def cancel(self) -> int:
        """Drops the queued batches; returns how many (their FIFO items are lost)."""
        dropped = self.queue.ahead
        for pending in self.queue.inflight:
            self.receive(pending)  # their replies carry fresher shard figures
        self.queue.clear()
        return dropped

    def reset(self) -> None:
        """Forgets the queued batches unread and the FIFO items in flight (clear, load)."""
        self.queue.clear()
        self.fifo_inflight[:] = 0
