"""Per-rank replay sampling: one round of prefetch, prepared off the critical path."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import torch

from replay.client import ReplayClient
from replay.sampling.samplers import EmptyReplayError
from replay.sampling.sharding import PendingSample

if TYPE_CHECKING:  # annotations only: the driver plans epochs without importing tensordict
    from tensordict import TensorDict

logger = logging.getLogger(__name__)

Prepare = Callable[[dict[str, np.ndarray]], "TensorDict"]


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """An on-policy round: this rank's share of the batch, trained in epochs of minibatches.

    Attributes:
        items: Items this rank takes from the (FIFO) tables: the batch divided by world size.
        epochs: Passes over those items.
        minibatches: Minibatches per pass (each rank's part of every global minibatch).
        max_policy_lag: Set for a round of the asynchronous loop (IMPALA, APPO): the items come
            from a FIFO queue (``replay.fifo_queue``) and those acted by a version more than
            this many versions old are dropped (see :meth:`RankSampler.take_queue`).
    """

    items: int
    epochs: int = 1
    minibatches: int = 1
    max_policy_lag: int | None = None

    @property
    def steps(self) -> int:
        """Optimizer steps of the round."""
        return self.epochs * self.minibatches


class Passes:
    """A round's minibatches of steps, made pass by pass (``minibatch_unit: steps``).

    Each pass calls ``prepare_pass(chunks)`` (the loss's, with the networks as the previous
    pass left them) for ``[B x T]`` step items, then splits a fresh permutation of them into
    ``plan.minibatches`` near-equal minibatches. Iterate once.

    Args:
        chunks: The rank's share of the round's chunks.
        plan: Its passes and minibatches per pass.
        rng: The rank's sampling generator (``permutation``).
        prepare_pass: Chunks to step items.
    """

    def __init__(self, chunks: TensorDict, plan: EpochPlan, rng, prepare_pass) -> None:
        self.chunks, self.plan, self.rng, self.prepare_pass = chunks, plan, rng, prepare_pass

    def __len__(self) -> int:
        return self.plan.steps

    @property
    def samples(self) -> int:
        """Step items trained on over the round (every pass trains on every step once)."""
        return self.plan.epochs * self.chunks["action"].shape[0] * self.chunks["action"].shape[1]

    def __iter__(self) -> Iterator[TensorDict]:
        for _ in range(self.plan.epochs):
            items = self.prepare_pass(self.chunks)
            order = torch.from_numpy(self.rng.permutation(len(items))).to(items.device)
            yield from (items[part] for part in order.tensor_split(self.plan.minibatches))


class RankSampler:
    """Draws a rank's batches for a round, fetching and preparing the next round's ahead.

    A round of ``k`` steps takes ``k * per_step`` items in one request per shard, shuffled so
    that every step mixes the shards, converted by ``prepare`` (arrays to a TensorDict on the
    model's device) and split into ``k`` batches. With ``prefetch``:

    1. :meth:`take` returns the batches prepared for this round and at once sends the shard
       requests for the next round (assumed as long), so replay samples while the rank trains;
    2. :meth:`prepare_next`, called when the round's training is done, collects the replies and
       prepares the batches in a background thread while the rank answers the driver and waits
       for the next round.

    A longer next round tops up synchronously, a shorter one uses the first batches (already
    shuffled). Prefetched items were drawn one round earlier, a staleness of at most one round
    of collection.

    Args:
        client: This rank's replay client.
        per_step: Items per optimizer step on this rank.
        prepare: Converts sampled arrays to a TensorDict (e.g. ``LearnerCore.to_batch``).

    Keyword Args:
        prefetch: Request and prepare the next round's items ahead.
        prepare_pass: The loss's map of a round's chunks to one pass's step items (APPO's
            ``prepare_pass`` with ``learner.vtrace.minibatch_unit: steps``), else None.

    Examples:
        >>> sampler = RankSampler(ReplayClient(shards, seed=0), 32, core.to_batch)  # doctest: +SKIP
        >>> batches = sampler.take(num_steps=16)  # 16 batches of 32  # doctest: +SKIP
        >>> sampler.prepare_next()  # after training  # doctest: +SKIP
    """

    def __init__(
        self,
        client: ReplayClient,
        per_step: int,
        prepare: Prepare,
        *,
        prefetch: bool = True,
        prepare_pass: Callable[[TensorDict], TensorDict] | None = None,
    ) -> None:
        self.client = client
        self.per_step = per_step
        self.prepare = prepare
        self.prepare_pass = prepare_pass  # the loss's chunks to a pass's steps (APPO's)
        self.prefetch = prefetch
        self.pending: tuple[int, PendingSample] | None = None
        self.ready: Future | None = None
        self._executor = ThreadPoolExecutor(1, "rank-sampler") if prefetch else None

    def take(self, num_steps: int) -> list[TensorDict]:
        """Returns ``num_steps`` batches of ``per_step`` items and requests the next round's.

        Raises:
            replay.sampling.samplers.EmptyReplayError: If every shard is empty.
        """
        batches = self._prepared()[:num_steps]
        if len(batches) < num_steps:
            wanted = (num_steps - len(batches)) * self.per_step
            batches += self._batches(self.client.sample(wanted))
        if self.prefetch:
            try:
                self.pending = (num_steps, self.client.sample_async(num_steps * self.per_step))
            except EmptyReplayError:
                self.pending = None
        return batches

    def take_epochs(self, plan: EpochPlan, version: int) -> tuple[list[TensorDict], int]:
        """An on-policy round's batches: ``plan.items`` fetched once, then shuffled per epoch.

        Each epoch is a fresh permutation of the items (this rank's sampling generator) split
        into ``plan.minibatches`` near-equal minibatches, so every item is trained on exactly
        ``plan.epochs`` times. Nothing is prefetched: the next round's data does not exist yet.

        Args:
            plan: Items, epochs and minibatches.
            version: The learner's model version, to measure the items' policy lag.

        Returns:
            ``(batches, policy_lag)``: ``epochs * minibatches`` batches and the largest
            ``version - policy_version`` among the items.

        Raises:
            replay.sampling.samplers.EmptyReplayError: If every shard is empty.
        """
        arrays = self.client.sample(plan.items)
        lag = int(version - arrays["policy_version"].min()) if "policy_version" in arrays else 0
        batch = self.prepare(arrays)
        batches = []
        for _ in range(plan.epochs):
            order = torch.from_numpy(self.client.rng.permutation(plan.items)).to(batch.device)
            batches += [batch[part] for part in order.tensor_split(plan.minibatches)]
        return batches, lag

    def take_queue(
        self,
        plan: EpochPlan,
        version: int,
        *,
        timeout_s: float = 600.0,
    ) -> tuple[list[TensorDict] | Passes, dict[str, float], np.ndarray]:
        """An asynchronous round's batches: the ``plan.items`` oldest items of the queue.

        The driver starts a round only once the queue holds the whole batch, but the ranks'
        requests race for the shards' items, so a short reply is topped up until this rank has
        its share. Items acted by a version more than ``plan.max_policy_lag`` behind ``version``
        are dropped: kept in the batch's shape with every step masked (``valid`` False), so
        each rank still takes part in every collective, and counted.

        With :attr:`prepare_pass` set (``learner.vtrace.minibatch_unit: steps``) the batches are
        :class:`Passes`: each pass maps the chunks to step items first and draws its
        minibatches from those.

        Returns:
            ``(batches, stats, lags)``; ``stats`` has ``policy_lag`` (the largest lag among the
            items), and, summed over the items, ``lag_sum``, ``items_dropped``,
            ``frames_trained`` and ``frames_dropped`` (valid steps of the kept and of the dropped
            items); ``lags`` counts the items by lag (``max_policy_lag + 2`` bins, the last for
            the dropped).

        Raises:
            TimeoutError: If the queue does not yield the share within ``timeout_s``.
        """
        parts, have = [], 0
        deadline = time.monotonic() + timeout_s
        while have < plan.items:
            part = self.client.sample(plan.items - have)
            got = len(part.get("index", ()))
            if got:
                parts.append(part)
                have += got
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"the learner queue gave {have} of {plan.items} items")
            time.sleep(0.002)  # another rank's request took the items this one was told of
            self.client.refresh()
        arrays = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        lag = version - arrays["policy_version"]
        limit = plan.max_policy_lag or 0
        stale = lag > limit
        lags = np.bincount(np.clip(lag, 0, limit + 1), minlength=limit + 2)
        frames = arrays["valid"].sum(axis=1)
        arrays["valid"] = arrays["valid"] & ~stale[:, None]
        stats = {
            "policy_lag": float(lag.max()),
            "lag_sum": float(lag.sum()),
            "items_dropped": float(stale.sum()),
            "frames_trained": float(frames[~stale].sum()),
            "frames_dropped": float(frames[stale].sum()),
        }
        batch = self.prepare(arrays)
        if self.prepare_pass is not None:
            return Passes(batch, plan, self.client.rng, self.prepare_pass), stats, lags
        batches = []
        for _ in range(plan.epochs):
            order = torch.from_numpy(self.client.rng.permutation(plan.items)).to(batch.device)
            batches += [batch[part] for part in order.tensor_split(plan.minibatches)]
        return batches, stats, lags

    def prepare_next(self) -> None:
        """Collects and prepares the requested next round in the background."""
        if self.pending is not None:
            assert self._executor is not None  # a request is pending with prefetch only
            _, requests = self.pending
            self.pending = None
            self.ready = self._executor.submit(lambda: self._batches(self.client.collect(requests)))

    def reset(self) -> None:
        """Waits for background work and drops every prefetched item (after a restore)."""
        self.drain()
        self.pending = None
        self.ready = None

    def drain(self) -> None:
        """Waits for background preparation (before reading or setting the client's RNG)."""
        if self.ready is not None:
            self.ready.exception()

    def close(self) -> None:
        """Stops the background thread."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _prepared(self) -> list[TensorDict]:
        if self.ready is None:
            return []
        ready, self.ready = self.ready, None
        return ready.result()

    def _batches(self, arrays: dict[str, np.ndarray]) -> list[TensorDict]:
        order = self.client.rng.permutation(len(arrays["index"]))
        batch = self.prepare({k: v[order] for k, v in arrays.items()})
        return list(batch.split(self.per_step))
