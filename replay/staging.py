"""A deterministic shard's staging area: writes and priority updates wait for the next commit.

In a deterministic run (``run.deterministic``) what a shard holds may not depend on the order
in which writes and updates arrive. So a shard stages them on arrival and applies them only
when the driver commits (between rounds, when nothing is in flight), in a fixed order:

1. priority updates, all at once: where one item was updated more than once since the last
   commit (two steps or two ranks drew it), it takes the largest of those priorities;
2. writes, in ``(collector index, seq)`` order (the writer id ``collector-<i>/<token>`` names
   the index; other writers sort by name after the collectors).

Between commits a shard's contents are frozen, so every sample drawn from it sees the same
table whatever the timing. A write staged twice under one ``(writer_id, seq)`` is a retry and
is stored once.

Examples:
    >>> import numpy as np
    >>> from replay.table import ReplayTable
    >>> table, staging = ReplayTable(8), Staging()
    >>> _ = staging.write(table, {"x": np.full((2, 1), 1.0)}, "collector-1/b", 0)
    >>> _ = staging.write(table, {"x": np.full((2, 1), 0.0)}, "collector-0/a", 0)
    >>> len(table), staging.commit(table)
    (0, {'writes': 2, 'items': 4, 'updates': 0})
    >>> table.storage.gather(np.arange(4))["x"].ravel().tolist()  # collector 0 first
    [0.0, 0.0, 1.0, 1.0]
"""

from __future__ import annotations

import re

import numpy as np

from replay.receipts import WriteReceipt
from replay.sampling.samplers import PrioritizedSampler
from replay.storage import Batch, as_array_batch

_COLLECTOR = re.compile(r"^collector-(\d+)(/|$)")


def write_order(writer_id: str, seq: int) -> tuple:
    """The sort key of a staged write: collectors by index, then other writers by name.

    Examples:
        >>> sorted([("collector-10/x", 0), ("collector-2/y", 5), ("ext", 0)],
        ...        key=lambda w: write_order(*w))
        [('collector-2/y', 5), ('collector-10/x', 0), ('ext', 0)]
    """
    match = _COLLECTOR.match(writer_id)
    if match:
        return (0, int(match.group(1)), "", seq)
    return (1, 0, writer_id, seq)


class Staging:
    """Writes and priority updates held until :meth:`commit` (one per deterministic shard)."""

    def __init__(self) -> None:
        self.writes: dict[tuple[str, int], Batch] = {}
        self.updates: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.items = 0

    def write(self, table, batch: Batch, writer_id: str, seq: int) -> WriteReceipt:
        """Stages a copy of a write; its receipt's slots are ``-1`` (known at the commit).

        A write the table or the staging area already holds is acknowledged as a duplicate.

        Raises:
            replay.storage.SchemaError: If the batch does not match the table's schema (a
                frame-stream write's frame positions are checked at the commit).
        """
        last = table._last.get(writer_id)
        duplicate = (writer_id, seq) in self.writes or (last is not None and seq <= last.seq)
        batch = dict(batch)
        frames = batch.pop("frames", None)  # a frame-stream write: its frames have their own size
        arrays = {key: np.array(value) for key, value in as_array_batch(batch).items()}
        check = getattr(table.storage, "check", None)
        if check is not None and getattr(table.storage, "schema", None) is not None:
            check(arrays)  # a write the table would refuse is refused now, not at the commit
        count = len(next(iter(arrays.values())))
        if frames is not None:
            arrays["frames"] = np.array(as_array_batch({"frames": frames})["frames"])
        if not duplicate:
            self.writes[(writer_id, seq)] = arrays
            self.items += count
        indices = np.full(0 if duplicate else count, -1, dtype=np.int64)
        return WriteReceipt(
            table.shard_id,
            writer_id,
            seq,
            indices,
            table.write_count + self.items,
            duplicate=duplicate,
        )

    def update(self, indices, insertion_ids, priorities) -> int:
        """Stages a priority update; returns how many items it names."""
        self.updates.append(
            (
                np.asarray(indices, dtype=np.int64),
                np.asarray(insertion_ids, dtype=np.int64),
                np.asarray(priorities, dtype=np.float64),
            )
        )
        return len(self.updates[-1][0])

    def commit(self, table) -> dict:
        """Applies the staged updates, then the staged writes in order; empties the stage.

        Items a sample found dead since the last commit (``ReplayTable.dead_draws``, frame-
        deduplicated prioritized tables) get the smallest priority with the updates.

        Returns:
            ``{"writes": n, "items": n, "updates": n}``: what was applied.
        """
        applied = 0
        if table.dead_draws and isinstance(table.sampler, PrioritizedSampler):
            for slots, ids in table.dead_draws:
                self.update(slots, ids, np.zeros(len(slots)))
        if table.dead_draws is not None:
            table.dead_draws.clear()
        if self.updates:
            parts = zip(*self.updates, strict=True)
            indices, ids, priorities = (np.concatenate(part) for part in parts)
            # Sorted by (slot, insertion id, priority): numpy's assignment keeps the last of
            # repeated slots, so each item gets its largest staged priority, in any arrival order.
            order = np.lexsort((priorities, ids, indices))
            applied = table.update_priorities(indices[order], ids[order], priorities[order])
        items = 0
        for key in sorted(self.writes, key=lambda k: write_order(*k)):
            items += len(table.write(self.writes[key], *key).indices)
        result = {"writes": len(self.writes), "items": items, "updates": applied}
        self.writes.clear()
        self.updates.clear()
        self.items = 0
        return result

    def __len__(self) -> int:
        return len(self.writes) + len(self.updates)
