"""The driver's rollouts in flight, at a cost per event that does not grow with the fleet (pure).

:class:`InFlight` maps each rollout's ticket to its collector and issue time, and keeps what
the loops and fault handling ask at every event answerable without a scan of the fleet:

    * how many rollouts are in flight (the frame budget), and per collector;
    * which collectors have a free slot (``collector.max_inflight``): a queue, refilled as
      rollouts finish, so issuing costs what is issued;
    * which rollouts have run past ``collector.rollout_timeout_s``: tickets are kept in issue
      order, so only the overdue ones (and the first one that is not) are looked at.

Examples:
    >>> now = [0.0]
    >>> inflight = InFlight(num_collectors=2, slots=1, clock=lambda: now[0])
    >>> inflight.next_free(), inflight.next_free(), inflight.next_free()
    (0, 1, None)
    >>> inflight.add("a", 0); now[0] = 5.0; inflight.add("b", 1)
    >>> len(inflight), inflight.overdue(timeout=2.0)
    (2, [('a', 0)])
    >>> inflight.overdue(timeout=2.0)  # each overdue rollout is reported once
    []
    >>> inflight.pop("a"), inflight.next_free()
    (0, 0)
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Hashable, Iterator


class InFlight:
    """Rollouts in flight by ticket (see the module docstring).

    Args:
        num_collectors: Collectors in the run.
        slots: Rollouts each collector may have in flight (``collector.max_inflight``).

    Keyword Args:
        clock: Monotonic seconds (issue times).
    """

    def __init__(
        self,
        num_collectors: int = 0,
        slots: int = 1,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slots = slots
        self.clock = clock
        self.per_collector = [0] * num_collectors
        self._tickets: dict[Hashable, tuple[int, float]] = {}  # issue order
        self._free = collections.deque(i for _ in range(slots) for i in range(num_collectors))
        self._queued = [slots] * num_collectors  # turns of each collector in _free
        self._reported: set[Hashable] = set()
        self.retired: set[int] = set()  # collectors leaving the fleet (services.driver.elastic)

    def __len__(self) -> int:
        return len(self._tickets)

    def __contains__(self, ticket: Hashable) -> bool:
        return ticket in self._tickets

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._tickets)

    def add(self, ticket: Hashable, index: int) -> None:
        """A rollout of collector ``index`` was issued under ``ticket``."""
        self._tickets[ticket] = (index, self.clock())
        self.per_collector[index] += 1

    def pop(self, ticket: Hashable) -> int:
        """A rollout finished (counted or lost); returns its collector, whose slot is free."""
        index, _ = self._tickets.pop(ticket)
        self._reported.discard(ticket)
        self.per_collector[index] -= 1
        if index in self.retired:
            return index
        if self._queued[index] < self.slots - self.per_collector[index]:
            self._queued[index] += 1
            self._free.append(index)
        return index

    def grow(self, index: int) -> None:
        """Collector ``index`` joined the fleet (the next index): its slots get turns."""
        while len(self.per_collector) <= index:
            self.per_collector.append(0)
            self._queued.append(0)
        self.retired.discard(index)
        for _ in range(self.slots):
            self._queued[index] += 1
            self._free.append(index)

    def retire(self, index: int) -> None:
        """Collector ``index`` leaves: no more turns (its rollouts in flight still finish)."""
        self.retired.add(index)

    def next_free(self) -> int | None:
        """A collector with fewer than ``slots`` rollouts in flight (None: every one is busy).

        Each call takes one free slot's turn; :meth:`add` the rollout issued on it.
        """
        while self._free:
            index = self._free.popleft()
            self._queued[index] -= 1
            if self.per_collector[index] < self.slots and index not in self.retired:
                return index
        return None

    def release(self, index: int) -> None:
        """Gives back a turn :meth:`next_free` handed out but no rollout used."""
        self._queued[index] += 1
        self._free.appendleft(index)

    def overdue(self, timeout: float) -> list[tuple[Hashable, int]]:
        """Rollouts in flight for longer than ``timeout`` seconds, each reported once."""
        deadline = self.clock() - timeout
        found = []
        for ticket, (index, issued) in self._tickets.items():
            if issued > deadline:
                break
            if ticket not in self._reported:
                self._reported.add(ticket)
                found.append((ticket, index))
        return found
