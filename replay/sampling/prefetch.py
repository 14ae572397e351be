"""The batches a client keeps ahead of its caller: received ones ready, requested ones in flight.

``sample(n, prefetch=k)`` keeps ``k`` batches ahead of the one it returns and requests them
``k`` at a time (one call per shard per ``k`` batches: a Ray call's cost is spread over ``k``
batches). :class:`PrefetchQueue` is the bookkeeping of that, with no Ray in it: what is queued,
how many batches the next request should fetch, and the split of a fetched group into batches.
"""

from __future__ import annotations

import collections

import numpy as np

from replay.sampling.sharding import PendingSample, split_group


class PrefetchQueue:
    """Batches of one size fetched ahead of the caller.

    Attributes:
        ready: Received batches, each ``(batch, smallest draw probability of its fetch)``.
        inflight: Requests sent and not yet received, oldest first.
        batch_size: The size of the queued batches (None when nothing was queued since the last
            :meth:`clear`).

    Examples:
        >>> queue = PrefetchQueue()
        >>> queue.to_request(prefetch=2)  # nothing queued: this batch and two more
        3
        >>> group = {"index": np.arange(6)}
        >>> queue.unpack(group, 0.5, num_batches=3, rng=None)
        >>> queue.ahead, queue.to_request(prefetch=2)
        (3, 0)
        >>> queue.pop()[0]["index"].tolist()
        [0, 1]
    """

    def __init__(self) -> None:
        self.ready: collections.deque[tuple[dict[str, np.ndarray], float]] = collections.deque()
        self.inflight: collections.deque[PendingSample] = collections.deque()
        self.batch_size: int | None = None

    @property
    def ahead(self) -> int:
        """Batches received or requested and not yet handed out."""
        return len(self.ready) + sum(p.num_batches for p in self.inflight)

    def holds_other(self, batch_size: int) -> bool:
        """Whether batches of a size other than ``batch_size`` are queued."""
        return self.batch_size != batch_size and bool(self.ready or self.inflight)

    def to_request(self, prefetch: int) -> int:
        """Batches the next request should fetch so ``prefetch`` stay ahead (0: none needed).

        Nothing queued: the batch to return now plus ``prefetch``. Otherwise a new group of
        ``prefetch`` once fewer than ``prefetch`` would remain after the one returned now.
        """
        ahead = self.ahead
        if ahead == 0:
            return prefetch + 1
        return prefetch if ahead - 1 < prefetch else 0

    def unpack(
        self,
        group: dict[str, np.ndarray],
        min_probability: float,
        num_batches: int,
        rng: np.random.Generator | None,
    ) -> None:
        """Queues a fetched group as ``num_batches`` batches (see ``sharding.split_group``)."""
        parts = split_group(group, num_batches, rng)
        self.ready.extend((part, min_probability) for part in parts)

    def pop(self) -> tuple[dict[str, np.ndarray], float]:
        """The oldest ready batch and the smallest draw probability of its fetch."""
        return self.ready.popleft()

    def clear(self) -> None:
        """Forgets every queued batch and request."""
        self.ready.clear()
        self.inflight.clear()
        self.batch_size = None
