"""Which rollout failures are new collector deaths (pure, no Ray).

Ray fails every rollout sent to a collector between its death and its restart, so one death
shows up as several failures. :class:`DeathLedger` counts a failure as a new death only if its
rollout was issued after the collector had answered again since the last recorded death; until
it has, the collector is *recovering* and its rollouts carry the newest weights unconditionally
(Ray restarts it with its initial ones).

Examples:
    >>> ledger = DeathLedger(num_collectors=1)
    >>> ledger.issued("a", 0), ledger.issued("b", 0)  # (recovering?) for each
    (False, False)
    >>> ledger.died(0, "a"), ledger.died(0, "b")  # one death fails both rollouts
    (True, False)
    >>> ledger.issued("c", 0)  # recovering: weights travel with it
    True
    >>> ledger.answered(0, "c", dead=False); ledger.recovering(0)
    False
"""

from __future__ import annotations

import collections
from collections.abc import Hashable

# Recent rollouts whose issue-time death count is remembered (at least; 8 per collector).
ISSUED_MEMORY = 4096


class DeathLedger:
    """Deaths per collector, and the rollouts issued since each one (see the module docstring).

    Args:
        num_collectors: Collectors in the group.

    Attributes:
        restarts: Deaths recorded (each restarted by Ray), not lost rollouts.
    """

    def __init__(self, num_collectors: int) -> None:
        self.restarts = 0
        self._deaths = [0] * num_collectors
        self._recovering: list[set[Hashable] | None] = [None] * num_collectors
        self._issued: collections.OrderedDict[Hashable, int] = collections.OrderedDict()
        self._memory = max(ISSUED_MEMORY, 8 * num_collectors)

    def grow(self, count: int) -> None:
        """Makes room for ``count`` more collectors (indices after the current ones)."""
        self._deaths += [0] * count
        self._recovering += [None] * count

    def recovering(self, index: int) -> bool:
        """Whether collector ``index`` has not answered since its last recorded death."""
        return self._recovering[index] is not None

    def issued(self, ticket: Hashable, index: int) -> bool:
        """Notes a rollout sent to collector ``index``; returns whether it is recovering."""
        recovering = self._recovering[index]
        deaths = self._deaths[index]
        self._issued[ticket] = deaths - 1 if recovering is not None else deaths
        if len(self._issued) > self._memory:
            self._issued.popitem(last=False)
        if recovering is not None:
            recovering.add(ticket)
        return recovering is not None

    def answered(self, index: int, ticket: Hashable, *, dead: bool) -> None:
        """A rollout finished; one issued while recovering and not lost to a death ends it."""
        recovering = self._recovering[index]
        if recovering is not None and ticket in recovering:
            recovering.discard(ticket)
            if not dead:
                self._recovering[index] = None

    def died(self, index: int, ticket: Hashable | None = None) -> bool:
        """A rollout of collector ``index`` was lost to a dead actor; returns whether a new death.

        Without ``ticket`` every call counts a death.
        """
        issued_under = self._issued.pop(ticket, None) if ticket is not None else None
        if issued_under is not None and issued_under < self._deaths[index]:
            return False
        self._deaths[index] += 1
        self.restarts += 1
        self._recovering[index] = set()
        return True
