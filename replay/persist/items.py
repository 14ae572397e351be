"""Items taken out of a replay table and put into another: the unit of re-sharding.

An :class:`ItemSet` holds the stored columns of some items (policy version, n-step fields and
the like are ordinary columns and travel untouched), each item's priority mass (prioritized),
whether it is still to be handed out in the current pass (FIFO), its age (``writes_ago``: its
table's write count minus its insertion id) and where it came from. :func:`take_items` copies a
table's items out, oldest first; :func:`put_items` stores them into another table as new
writes, exactly: masses are set to the carried ones (no ``priority ** alpha`` round trip) and
FIFO items still pending join the current pass. ``replay.persist.reshard`` deals them over new
shards. Frame-deduplicated tables (``replay.frames``) share frames between items and are refused.

Examples:
    >>> old = ReplayTable(4, sampler="prioritized", seed=0)
    >>> _ = old.write({"x": np.arange(3)}, "w0", 0)
    >>> items = take_items(old)
    >>> new = ReplayTable(8, sampler="prioritized", seed=1)
    >>> put_items(new, items).tolist(), new.sampler.masses(np.arange(3)).tolist()
    ([0, 1, 2], [1.0, 1.0, 1.0])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from replay.frames import FrameStackStorage
from replay.sampling.samplers import FifoSampler, PrioritizedSampler
from replay.storage import SchemaError
from replay.table import ReplayTable

FRAMES_REFUSED = (
    "re-sharding a frame-deduplicated replay (replay.frame_stack > 0) is not supported: "
    "its items share frames"
)


@dataclasses.dataclass
class ItemSet:
    """Items taken out of replay tables, portable between tables (and Ray processes).

    Attributes:
        sampler: The sampler kind of the tables they came from.
        columns: The stored columns, one row per item (``{}`` when there are no items).
        writes_ago: Per item, its table's write count minus its insertion id (larger: older).
        source: Per item, the table it came from (its shard id, or its place in a list).
        insertion_id: Per item, its insertion id in that table.
        mass: Prioritized: per item, its mass ``priority ** alpha``; None otherwise.
        pending: FIFO: per item, whether it is still to be handed out in the current pass.
        max_priority: Prioritized: the largest priority the tables had seen.
        passes: FIFO: the number of the tables' current pass.
    """

    sampler: str
    columns: dict[str, np.ndarray]
    writes_ago: np.ndarray
    source: np.ndarray
    insertion_id: np.ndarray
    mass: np.ndarray | None = None
    pending: np.ndarray | None = None
    max_priority: float = 1.0
    passes: int = 0

    def __len__(self) -> int:
        return len(self.writes_ago)

    def select(self, rows: np.ndarray) -> ItemSet:
        """The items at ``rows`` (in that order)."""
        return dataclasses.replace(
            self,
            columns={k: v[rows] for k, v in self.columns.items()},
            writes_ago=self.writes_ago[rows],
            source=self.source[rows],
            insertion_id=self.insertion_id[rows],
            mass=None if self.mass is None else self.mass[rows],
            pending=None if self.pending is None else self.pending[rows],
        )

    @staticmethod
    def concat(sets: Sequence[ItemSet]) -> ItemSet:
        """The items of ``sets`` one after the other.

        Raises:
            ValueError: If the sets come from tables of different samplers.
            replay.storage.SchemaError: If their columns differ in keys, shapes or dtypes.
        """
        if not sets:
            raise ValueError("no item sets to merge")
        kinds = {s.sampler for s in sets}
        if len(kinds) > 1:
            raise ValueError(f"cannot merge items of samplers {sorted(kinds)}")
        filled = [s for s in sets if len(s)] or [sets[0]]
        schema = {k: (v.shape[1:], v.dtype) for k, v in filled[0].columns.items()}
        for s in filled[1:]:
            theirs = {k: (v.shape[1:], v.dtype) for k, v in s.columns.items()}
            if theirs != schema:
                raise SchemaError(f"items of different schemas: {schema} and {theirs}")

        def cat(name: str) -> np.ndarray | None:
            parts = [getattr(s, name) for s in filled]
            return None if parts[0] is None else np.concatenate(parts)

        return ItemSet(
            sampler=filled[0].sampler,
            columns={k: np.concatenate([s.columns[k] for s in filled]) for k in schema},
            writes_ago=cat("writes_ago"),
            source=cat("source"),
            insertion_id=cat("insertion_id"),
            mass=cat("mass"),
            pending=cat("pending"),
            max_priority=max(s.max_priority for s in sets),
            passes=max(s.passes for s in sets),
        )


def _refuse_frames(table: ReplayTable) -> None:
    if isinstance(table.storage, FrameStackStorage):
        raise ValueError(FRAMES_REFUSED)


def take_items(table: ReplayTable) -> ItemSet:
    """Copies every stored item of ``table``, oldest first (the table is left as it is).

    A FIFO queue's items already handed out (``replay.fifo_queue``) are done with: only those
    still queued are copied, so a re-sharded queue hands each chunk out once.

    Raises:
        ValueError: If the table is frame-deduplicated.
    """
    _refuse_frames(table)
    sampler = table.sampler
    floor = sampler.taken_id if isinstance(sampler, FifoSampler) and sampler.queue else -1
    slots = np.flatnonzero(table.insertion_ids > floor)
    slots = slots[np.argsort(table.insertion_ids[slots], kind="stable")]
    ids = table.insertion_ids[slots]
    items = ItemSet(
        sampler=sampler.kind,
        columns=table.storage.gather(slots) if table.storage.columns else {},
        writes_ago=table.write_count - ids,
        source=np.full(len(slots), table.shard_id, dtype=np.int64),
        insertion_id=ids.copy(),
    )
    if isinstance(sampler, PrioritizedSampler):
        items.mass = sampler.masses(slots).copy()
        items.max_priority = sampler.max_priority
    elif isinstance(sampler, FifoSampler):
        rest = sampler.order[sampler.position :]
        live = rest[table.insertion_ids[rest] == sampler.order_ids[sampler.position :]]
        items.pending = np.isin(slots, live)
        items.passes = sampler.passes
    return items


def put_items(table: ReplayTable, items: ItemSet) -> np.ndarray:
    """Stores ``items`` in ``table`` as new writes, in order; returns the slots they went to.

    Like a write, it overwrites the table's oldest items once the table is full (callers size
    the items to its free capacity). Prioritized masses are set to the carried ones exactly and
    the largest priority seen is the larger of the two; FIFO items still pending join the
    current pass, the others wait for the next one. The dedup state is not touched.

    Raises:
        ValueError: If the samplers differ or the table is frame-deduplicated.
        replay.storage.SchemaError: If the columns do not match the table's.
    """
    _refuse_frames(table)
    sampler = table.sampler
    if items.sampler != sampler.kind:
        raise ValueError(f"items of a {items.sampler!r} table into a {sampler.kind!r} table")
    if not len(items):
        return np.empty(0, dtype=np.int64)
    slots = table.storage.write(items.columns)
    kept = slots >= 0
    ids = table.write_count + np.arange(len(items), dtype=np.int64)
    table.insertion_ids[slots[kept]] = ids[kept]
    table.write_count += len(items)
    if isinstance(sampler, PrioritizedSampler):
        sampler.tree.update(slots[kept], items.mass[kept])
        sampler.max_priority = max(sampler.max_priority, items.max_priority)
    elif isinstance(sampler, FifoSampler):
        pending = items.pending & kept
        if pending.any():
            sampler.order = np.concatenate([sampler.order[sampler.position :], slots[pending]])
            sampler.order_ids = np.concatenate(
                [sampler.order_ids[sampler.position :], ids[pending]]
            )
            sampler.position = 0
            sampler.passes = max(sampler.passes, items.passes)
    return slots


def item_rows(itemsets) -> list[bytes]:
    r"""Every item of ``itemsets`` as bytes (all columns, then the priority mass), sorted.

    Two sets of tables hold the same items, priorities included, iff their rows are equal
    (re-sharding tests and ``services.bench elastic`` compare them so).

    Examples:
        >>> ids = np.arange(2)
        >>> items = ItemSet("uniform", {"a": np.array([[2], [1]], dtype=np.int8)}, ids, ids, ids)
        >>> item_rows([items])
        [b'\x01', b'\x02']
    """
    out = []
    for items in itemsets:
        n = len(items)
        if n == 0:
            continue
        parts = [
            np.ascontiguousarray(items.columns[key]).reshape(n, -1).view(np.uint8)
            for key in sorted(items.columns)
        ]
        if items.mass is not None:
            parts.append(
                np.ascontiguousarray(items.mass, dtype=np.float64).reshape(n, 1).view(np.uint8)
            )
        out += [row.tobytes() for row in np.concatenate(parts, axis=1)]
    return sorted(out)
