"""Per-rank replay sampling with one round of prefetch."""

from __future__ import annotations

import logging

import numpy as np

from replay.client import ReplayClient
from replay.samplers import EmptyReplayError

logger = logging.getLogger(__name__)


class RankSampler:
    """Draws a rank's samples for a round, requesting the next round's while this one trains.

    A round of ``k`` steps takes ``k * per_step`` items in one request per shard, shuffled so
    that every step mixes the shards. With ``prefetch``, the request for the next round (assumed
    to have as many steps) goes out as soon as this round's items are taken; a longer next round
    tops up synchronously, a shorter one uses a random subset. Prefetched items were drawn one
    round earlier, a staleness of at most one round of collection.

    Args:
        client: This rank's replay client.
        per_step: Items per optimizer step on this rank.

    Keyword Args:
        prefetch: Request the next round's items ahead.

    Examples:
        >>> sampler = RankSampler(ReplayClient(shards, seed=0), per_step=32)  # doctest: +SKIP
        >>> arrays = sampler.take(num_steps=16)  # 512 items  # doctest: +SKIP
    """

    def __init__(self, client: ReplayClient, per_step: int, *, prefetch: bool = True) -> None:
        self.client = client
        self.per_step = per_step
        self.prefetch = prefetch
        self.pending: list | None = None

    @property
    def rng(self) -> np.random.Generator:
        """The client's generator (shard split and shuffles)."""
        return self.client.rng

    def take(self, num_steps: int) -> dict[str, np.ndarray]:
        """Returns ``num_steps * per_step`` shuffled items (with ``shard`` and ``index``).

        Raises:
            replay.samplers.EmptyReplayError: If every shard is empty.
        """
        wanted = num_steps * self.per_step
        pending, self.pending = self.pending, None
        arrays = self.client.collect(pending) if pending else self.client.sample(wanted)
        have = len(arrays["index"])
        if have < wanted:
            extra = self.client.sample(wanted - have)
            arrays = {k: np.concatenate([v, extra[k]]) for k, v in arrays.items()}
        order = self.rng.permutation(len(arrays["index"]))[:wanted]
        arrays = {k: v[order] for k, v in arrays.items()}
        if self.prefetch:
            try:
                self.pending = self.client.sample_async(wanted)
            except EmptyReplayError:
                self.pending = None
        return arrays

    def reset(self) -> None:
        """Drops a prefetched request (after a restore: the next round samples afresh)."""
        self.pending = None
