"""Priority updates on their way to the shards: held per shard, sent one call at a time, flushed.

:class:`HeldUpdates` (pure) groups the updates of sampled items by shard until they leave;
:class:`PriorityRouter` sends each shard its held updates in one call unless its previous
update call is still in flight, and holds them back otherwise, so updates from one client reach
each shard in order and never pile up calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import ray

from replay.health import ShardView

# ``(index, insertion_id, priority)`` arrays of one shard's items.
Columns = tuple[np.ndarray, np.ndarray, np.ndarray]


class HeldUpdates:
    """Priority updates held per shard until they are sent.

    Args:
        num_shards: Shards of the service.

    Examples:
        >>> held = HeldUpdates(2)
        >>> keys = {"shard": [1, 0, 1], "index": [4, 5, 6], "insertion_id": [7, 8, 9]}
        >>> held.add(keys, [0.5, 1.0, 2.0])
        >>> [column.tolist() for column in held.take(1)]
        [[4, 6], [7, 9], [0.5, 2.0]]
        >>> held.take(1) is None
        True
    """

    def __init__(self, num_shards: int) -> None:
        self.parts: list[list[Columns]] = [[] for _ in range(num_shards)]

    def add(self, keys: Mapping[str, np.ndarray], priorities: np.ndarray) -> None:
        """Holds one priority per item of ``keys``, grouped by the item's shard.

        Args:
            keys: A sampled batch, or any mapping with its ``"shard"``, ``"index"`` and
                ``"insertion_id"`` arrays.
            priorities: One priority per item.

        Raises:
            ValueError: If the lengths differ.
        """
        shard_of = np.asarray(keys["shard"], dtype=np.int64)
        columns = (
            np.asarray(keys["index"], dtype=np.int64),
            np.asarray(keys["insertion_id"], dtype=np.int64),
            np.asarray(priorities, dtype=np.float64).reshape(-1),
        )
        if not len(shard_of) == len(columns[2]):
            raise ValueError(f"{len(columns[2])} priorities for {len(shard_of)} items")
        for shard in np.unique(shard_of):
            mask = shard_of == shard
            self.parts[shard].append(tuple(c[mask] for c in columns))

    def holds(self, shard: int) -> bool:
        """Whether updates for ``shard`` are held."""
        return bool(self.parts[shard])

    def take(self, shard: int) -> Columns | None:
        """Removes and returns ``shard``'s held updates as one set of columns (None if none)."""
        parts, self.parts[shard] = self.parts[shard], []
        if not parts:
            return None
        return tuple(np.concatenate(c) for c in zip(*parts, strict=True))

    def drop(self, shard: int) -> None:
        """Forgets ``shard``'s held updates."""
        self.parts[shard] = []

    def clear(self) -> None:
        """Forgets every held update."""
        self.parts = [[] for _ in self.parts]


class PriorityRouter:
    """Sends held priority updates to their shards, at most one call in flight per shard.

    Args:
        shards: The shard actors, in shard order.
        view: The client's view of the shards (a shard that is down gets nothing).

    Attributes:
        held: Updates not sent yet.
        refs: Per shard, the references of its update calls in flight.
    """

    def __init__(self, shards: Sequence[ray.actor.ActorHandle], view: ShardView) -> None:
        self.shards = list(shards)
        self.view = view
        self.held = HeldUpdates(len(self.shards))
        self.refs: list[list[ray.ObjectRef]] = [[] for _ in self.shards]

    def drop(self, shard: int) -> None:
        """Forgets what ``shard`` was sent and held (it lost its items with them)."""
        self.held.drop(shard)
        self.refs[shard] = []

    def send(self, *, force: bool) -> None:
        """Sends each live shard its held updates if its previous call is done (or ``force``).

        Raises:
            ValueError: If a shard refused an earlier update (e.g. a negative priority).
        """
        for shard, handle in enumerate(self.shards):
            if shard in self.view.down:
                continue
            refs = self.refs[shard]
            if refs:
                done, refs = ray.wait(refs, num_returns=len(refs), timeout=0)
                self.refs[shard] = refs
                for ref in done:  # surfaces a shard's refusal
                    self.view.get(shard, ref)
                if shard in self.view.down:
                    continue
            if self.held.holds(shard) and (force or not refs):
                refs.append(handle.update_priorities.remote(*self.held.take(shard)))

    def flush(self, *, wait: bool = False) -> None:
        """Sends every held update; with ``wait``, until all are applied.

        Raises:
            ValueError: If a shard refused an update (e.g. a negative priority).
        """
        self.send(force=True)
        if wait:
            pending, self.refs = self.refs, [[] for _ in self.shards]
            for shard, refs in enumerate(pending):
                for ref in refs:
                    self.view.get(shard, ref)  # a shard lost meanwhile lost its items too
