"""A replay service that changes its number of shards: the Ray side of ``replay.persist.reshard``.

:func:`load_resharded` loads a checkpoint of another number of shards (re-sharded by the caller's
process into a hidden sibling directory, which every shard then reads); :func:`move_items`
drains shards that are going away into the others. ``ReplayClient.load``, ``remove_shards``
and ``add_shards`` use them.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import ray

from replay.health import ShardView, shard_names
from replay.persist.reshard import partition, reshard_checkpoint
from replay.sampling.streams import stream_seed

logger = logging.getLogger(__name__)


def reshard_seeds(seed: int | None, num_shards: int) -> list[int]:
    """Sampler seeds of the shards of a re-sharded replay: from the seed and the shard index.

    Examples:
        >>> len(set(reshard_seeds(0, 3)))
        3
    """
    return [stream_seed(seed or 0, "replay", j, key=(num_shards,)) for j in range(num_shards)]


def load_resharded(
    view: ShardView, directory: Path, num_old: int, *, seed: int | None
) -> list[dict]:
    """Loads the ``num_old`` shards of checkpoint ``directory`` into ``view``'s shards.

    The checkpoint is re-sharded into ``<parent>/.reshard-<name>-<shards>`` (hidden: checkpoint
    listings skip it), each shard keeping its current capacity, and the directory is removed
    afterwards, also on failure. Returns each shard's stats after the load.

    Raises:
        replay.persist.npyio.CheckpointError: Naming an old file that is missing, truncated or
        corrupt.
        ValueError: If the replay is frame-deduplicated.
    """
    num_new = len(view.shards)
    resharded = directory.parent / f".reshard-{directory.name}-{num_new}"
    shutil.rmtree(resharded, ignore_errors=True)
    try:
        capacities = [s["capacity"] for s in view.each("stats")]
        counts = reshard_checkpoint(
            directory,
            num_old,
            num_new,
            resharded,
            capacity_per_shard=capacities,
            seeds=reshard_seeds(seed, num_new),
        )
        logger.info("replay re-sharded from %d to %d shards: %s", num_old, num_new, counts)
        return view.each("load", [str(resharded / f"replay-{j}") for j in range(num_new)])
    finally:
        shutil.rmtree(resharded, ignore_errors=True)


def move_items(view: ShardView, gone: Sequence[int], keep: Sequence[int]) -> int:
    """Drains shards ``gone`` into the free capacity of shards ``keep``; returns items moved.

    The oldest items that find no room are dropped and logged.
    """
    shards = view.shards
    stats = view.each("stats")
    free = [stats[i]["capacity"] - stats[i]["size"] for i in keep]
    drained = ray.get([shards[i].drain.remote() for i in gone])
    parts = partition(drained, len(keep), free)
    refs = [shards[i].absorb.remote(part) for i, part in zip(keep, parts, strict=True)]
    moved = sum(ray.get(refs))
    dropped = sum(len(items) for items in drained) - moved
    if dropped:
        logger.warning("removing %s dropped its %d oldest items", shard_names(gone), dropped)
    return moved
