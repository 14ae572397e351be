"""Re-sharding a replay service: every stored item moves into exactly one table of a new set.

A resumed run may have another number of shards than its checkpoint, and a live run may add or
remove shards. The items travel as a :class:`replay.persist.items.ItemSet`: the stored columns
(policy version, n-step fields and the like are ordinary columns and travel untouched), each item's
priority mass (prioritized), whether it is still to be handed out in the current pass (FIFO),
and its age (``writes_ago``: the table's write count minus the item's insertion id).

**The rule.** Items do not record their writer, so the writers' rule (``collector_id %
num_shards``) cannot be replayed. :func:`partition` merges the old shards' items oldest first
(largest ``writes_ago`` first; ties keep the old shards' order) and deals them round-robin
over the new shards (item ``k`` to shard ``k % S`` while every shard has room; a shard whose
capacity is reached is skipped). If the items exceed the new total capacity (only by rounding
of ``capacity // num_shards``), the oldest overflow is dropped and logged. Sampling across
shards is proportional to sizes (uniform) or masses (prioritized), so where the items sit does
not change the sampled distribution; the balanced deal keeps the shards' loads even.

**Exactness.** :func:`put_items` stores items as new writes (new insertion ids), sets the
prioritized masses to the carried ones (no ``priority ** alpha`` round trip) and keeps the
largest priority seen; FIFO items still pending in the current pass join the new table's
current pass (each is handed out once in it), the others wait for the next pass.
:func:`reshard_tables` also preserves the sums of the counters (``write_count``,
``sample_count``, ``priority_updates``, ``stale_updates``) and carries every writer's last
receipt into the shard such a writer writes to when it names none (``zlib.crc32(writer_id) %
num_shards``, ``ReplayClient.shard_for``), its indices remapped to the items that landed there.
Frame-deduplicated tables (``replay.frame_stack > 0``) share frames between items and are
refused.

Examples:
    >>> old = [ReplayTable(4, sampler="uniform", seed=0) for _ in range(2)]
    >>> _ = old[0].write({"x": np.arange(3)}, "w0", 0)
    >>> _ = old[1].write({"x": np.arange(3, 5)}, "w1", 0)
    >>> new = reshard_tables(old, 3, capacity_per_shard=4, seeds=[0, 1, 2])
    >>> [len(t) for t in new], sum(t.write_count for t in new)
    ([2, 2, 1], 5)
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from replay.persist.checkpoint import dump_table, load_table
from replay.persist.items import ItemSet, put_items, take_items
from replay.receipts import WriteReceipt
from replay.sampling.samplers import FifoSampler
from replay.table import MAX_WRITERS, ReplayTable

__all__ = [
    "ItemSet",
    "checkpoint_shards",
    "deal",
    "partition",
    "put_items",
    "reshard_checkpoint",
    "reshard_tables",
    "split_count",
    "take_items",
]

logger = logging.getLogger(__name__)


def deal(n: int, capacities: Sequence[int]) -> np.ndarray:
    """The shard of each of ``n`` items dealt round-robin, skipping shards that are full.

    Examples:
        >>> deal(7, [2, 4, 4]).tolist()
        [0, 1, 2, 0, 1, 2, 1]
    """
    capacities = np.asarray(capacities, dtype=np.int64)
    parts, dealt, level = [], 0, 0
    for cap in np.unique(capacities):  # rounds level..cap-1 go to the shards holding more
        if dealt >= n:
            break
        if cap <= level:
            continue
        active = np.flatnonzero(capacities >= cap)
        rounds = min(int(cap) - level, -(-(n - dealt) // len(active)))
        parts.append(np.tile(active, rounds))
        dealt += rounds * len(active)
        level = int(cap)
    shards = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    return shards[:n]


def partition(
    itemsets: Sequence[ItemSet], num_shards: int, capacities: int | Sequence[int]
) -> list[ItemSet]:
    """Splits the items of ``itemsets`` over ``num_shards`` new shards (the module's rule).

    Args:
        itemsets: The items of the old shards.
        num_shards: New shards.
        capacities: Items each new shard can take (one number for all, or one per shard).

    Returns:
        One :class:`ItemSet` per new shard, oldest first; every item is in exactly one, except
        the oldest beyond the total capacity, which are dropped (and logged).
    """
    if num_shards < 1:
        raise ValueError(f"num_shards: must be >= 1, got {num_shards}")
    if isinstance(capacities, int | np.integer):
        capacities = [int(capacities)] * num_shards
    if len(capacities) != num_shards or min(capacities) < 0:
        raise ValueError(f"capacities: need {num_shards} numbers >= 0, got {capacities}")
    merged = ItemSet.concat(itemsets)
    order = np.argsort(-merged.writes_ago, kind="stable")
    overflow = len(order) - sum(capacities)
    if overflow > 0:
        logger.warning("re-sharding drops the %d oldest items (no room for them)", overflow)
        order = order[overflow:]
    shard_of = deal(len(order), capacities)
    return [merged.select(order[shard_of == j]) for j in range(num_shards)]


def split_count(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers that differ by at most one (larger first).

    Examples:
        >>> split_count(7, 3)
        [3, 2, 2]
    """
    share, extra = divmod(int(total), parts)
    return [share + (j < extra) for j in range(parts)]


def reshard_tables(
    tables: Sequence[ReplayTable],
    num_shards: int,
    *,
    capacity_per_shard: int | Sequence[int],
    seeds: Sequence[int | None],
) -> list[ReplayTable]:
    """New tables holding the items of ``tables`` dealt over ``num_shards`` (module docstring).

    Args:
        tables: The old shards' tables, in shard order.
        num_shards: New shards.
        capacity_per_shard: Capacity of each new table (one number, or one per shard).
        seeds: Seed of each new table's sampler.

    Returns:
        The new tables (``shard_id`` 0, 1, ...) with the old ones' sampler kind, ``alpha`` and
        FIFO shuffle; counter sums preserved; writers' receipts carried (see the module).

    Raises:
        ValueError: If the tables' samplers differ, a table is frame-deduplicated, or the seeds
            are not one per new shard.
        replay.storage.SchemaError: If the tables' columns differ.
    """
    if not tables:
        raise ValueError("no tables to re-shard")
    if len(seeds) != num_shards:
        raise ValueError(f"seeds: need {num_shards}, got {len(seeds)}")
    sets = []
    for i, table in enumerate(tables):
        items = take_items(table)
        items.source[:] = i
        sets.append(items)
    parts = partition(sets, num_shards, capacity_per_shard)
    if isinstance(capacity_per_shard, int | np.integer):
        capacity_per_shard = [int(capacity_per_shard)] * num_shards
    first = tables[0].sampler
    unstored = sum(t.write_count for t in tables) - sum(len(p) for p in parts)
    new, slots = [], []
    for j, base in enumerate(split_count(unstored, num_shards)):
        table = ReplayTable(
            max(1, capacity_per_shard[j]),
            shard_id=j,
            sampler=first.kind,
            seed=seeds[j],
            alpha=getattr(first, "alpha", 0.6),
            fifo_shuffle=getattr(first, "shuffle", False),
            fifo_queue=getattr(first, "queue", False),
        )
        table.write_count = base  # so the write counts sum to the old ones
        slots.append(put_items(table, parts[j]))
        if isinstance(table.sampler, FifoSampler):
            table.sampler.passes = max(t.sampler.passes for t in tables)
        new.append(table)
    for counter in ("sample_count", "priority_updates", "stale_updates"):
        total = sum(getattr(t, counter) for t in tables)
        for table, share in zip(new, split_count(total, num_shards), strict=True):
            setattr(table, counter, share)
    _carry_receipts(tables, new, parts, slots)
    return new


def _carry_receipts(
    tables: Sequence[ReplayTable],
    new: Sequence[ReplayTable],
    parts: Sequence[ItemSet],
    slots: Sequence[np.ndarray],
) -> None:
    """Gives each new table the last receipt of the writers that write to it by default."""
    latest: dict[str, tuple[int, int, WriteReceipt]] = {}  # writer: (writes ago, source, receipt)
    for i, table in enumerate(tables):
        for writer, receipt in table._last.items():
            mine = (table.write_count - receipt.write_count, i, receipt)
            if writer not in latest or receipt.seq > latest[writer][2].seq:
                latest[writer] = mine
    # Where each (source, insertion id) landed: per new shard, sorted keys and their new slots.
    landed = []
    for items, where in zip(parts, slots, strict=True):
        keys = np.stack([items.source, items.insertion_id], axis=1)
        order = np.lexsort((keys[:, 1], keys[:, 0]))
        landed.append((keys[order], where[order]))
    oldest_first = sorted(latest.items(), key=lambda kv: -kv[1][0])
    for writer, (_, source, receipt) in oldest_first:
        j = zlib.crc32(writer.encode()) % len(new)
        keys, where = landed[j]
        n = len(receipt.indices)
        wanted = receipt.write_count - n + np.flatnonzero(receipt.indices >= 0)
        found = _lookup(keys, source, wanted)
        indices = where[found[found >= 0]]
        table = new[j]
        table._last[writer] = WriteReceipt(j, writer, receipt.seq, indices, table.write_count)
        if len(table._last) > MAX_WRITERS:
            table._last.popitem(last=False)


def _lookup(keys: np.ndarray, source: int, ids: np.ndarray) -> np.ndarray:
    """Rows of sorted ``keys`` (source, id) holding ``(source, ids[k])``, or -1."""
    if not len(keys):
        return np.full(len(ids), -1, dtype=np.int64)
    lo, hi = np.searchsorted(keys[:, 0], [source, source + 1])
    column = keys[lo:hi, 1]
    at = np.searchsorted(column, ids)
    hit = at < len(column)
    hit[hit] = column[at[hit]] == ids[hit]
    return np.where(hit, lo + at, -1)


def reshard_checkpoint(
    src: Path,
    num_old: int,
    num_new: int,
    dst: Path,
    *,
    capacity_per_shard: int | Sequence[int],
    seeds: Sequence[int | None],
) -> dict:
    """Re-shards the replay of a checkpoint: ``src/replay-<i>`` into ``dst/replay-<j>``.

    Args:
        src: The checkpoint directory holding ``replay-0`` ... ``replay-<num_old - 1>``.
        num_old: Shards in the checkpoint.
        num_new: Shards to write.
        dst: Where to write them (created if missing).
        capacity_per_shard: Capacity of each new shard (one number, or one per shard).
        seeds: Seed of each new shard's sampler.

    Returns:
        ``{"items_before", "items_after", "dropped"}``.

    Raises:
        replay.persist.npyio.CheckpointError: Naming an old file that is missing, truncated or
        corrupt.
        ValueError: If the replay is frame-deduplicated (see :func:`reshard_tables`).
    """
    tables = [load_table(Path(src) / f"replay-{i}") for i in range(num_old)]
    before = sum(len(t) for t in tables)
    new = reshard_tables(tables, num_new, capacity_per_shard=capacity_per_shard, seeds=seeds)
    del tables
    for j, table in enumerate(new):
        dump_table(table, Path(dst) / f"replay-{j}")
    after = sum(len(t) for t in new)
    return {"items_before": before, "items_after": after, "dropped": before - after}


def checkpoint_shards(directory: Path) -> int:
    """How many shards a checkpoint holds: its ``replay-0``, ``replay-1``, ... directories."""
    count = 0
    while (Path(directory) / f"replay-{count}").is_dir():
        count += 1
    return count
