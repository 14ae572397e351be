"""Finished rollouts as a queue the driver drains, instead of a scan of everything in flight.

A driver that waits with ``ray.wait`` over the references of every rollout in flight pays for
all of them at each receipt: with N collectors that is O(N) per event and O(N^2) per run. Here
each finished call puts itself into a queue (a Ray future callback, run on Ray's own thread),
so the driver pays for what finished and nothing else:

    * :class:`Finished`: one rollout's outcome (its ticket, collector, receipt or error);
    * :class:`Completions`: the queue; :meth:`Completions.wait` blocks until something
      finished, then takes everything that did. :meth:`Completions.watch` wakes a waiter when
      another reference is ready, and :meth:`Completions.ready` says whether a group of them
      (a learner round's receipts) all are.

Examples:
    >>> completions = Completions()
    >>> completions.put([Finished("t0", 0, receipt="r0"), Finished("t1", 1, error=OSError())])
    >>> [(f.ticket, f.ok) for f in completions.wait(timeout=0)]
    [('t0', True), ('t1', False)]
    >>> completions.wait(timeout=0)
    []
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import queue
from collections.abc import Hashable, Sequence
from typing import Any

# A queue entry that only wakes the waiter (a watched reference became ready).
WAKE: tuple = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Finished:
    """The outcome of one rollout call.

    Attributes:
        ticket: What :meth:`collector.manage.group.CollectorGroup.rollout` returned for it.
        index: The collector that ran it.
        receipt: Its ``RolloutReceipt`` when it succeeded.
        error: What it raised otherwise (``RayActorError``: the collector died; a
            ``RayTaskError`` whose ``cause`` is an ``EnvError``: an env failed; anything else).
    """

    ticket: Hashable
    index: int
    receipt: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        """Whether the rollout returned a receipt."""
        return self.error is None


class Completions:
    """A thread-safe queue of finished rollouts, fed by Ray's callback thread.

    Producers put whole batches (one Ray reply can carry many receipts), so the consumer takes
    the queue's lock once per batch, not per receipt.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Sequence[Finished]] = queue.SimpleQueue()
        self._watched: Sequence | None = None  # the references :meth:`ready` watches
        self._futures: list[concurrent.futures.Future] = []

    def put(self, batch: Sequence[Finished]) -> None:
        """Adds finished rollouts (an empty batch only wakes a waiter)."""
        self._queue.put(batch)

    def watch(self, ref) -> concurrent.futures.Future:
        """Wakes :meth:`wait` when the Ray reference ``ref`` is ready; returns its future.

        The future's ``done()`` says whether ``ref`` is ready (``ray.wait`` with no timeout does
        not: it reports an object only once it is local, and nothing fetches it).
        """
        future = ref.future()
        future.add_done_callback(lambda _: self._queue.put(WAKE))
        return future

    def ready(self, refs: Sequence) -> bool:
        """Whether every reference of ``refs`` is ready (the first call watches them).

        The watched group is kept until ``refs`` is another object (the next learner round).
        """
        if self._watched is not refs:
            self._watched, self._futures = refs, [self.watch(ref) for ref in refs]
        return all(future.done() for future in self._futures)

    def wait(self, timeout: float | None) -> list[Finished]:
        """Waits up to ``timeout`` seconds for anything to finish; returns all that did.

        Returns an empty list on a timeout or when only a watched reference became ready;
        ``timeout`` 0 takes what has finished without waiting, None waits as long as it takes.
        """
        try:
            if timeout is not None and timeout <= 0:
                batches = [self._queue.get_nowait()]
            else:
                batches = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                batches.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return [finished for batch in batches for finished in batch]
