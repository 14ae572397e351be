"""The elastic bench's pure helpers (no Ray): rows, resize keys, targets and rates."""

from __future__ import annotations

import numpy as np

from replay.persist.items import ItemSet
from replay.persist.items import item_rows as rows
from services.bench.runtime.elastic import rate, resize_seconds, size_key, targets_met


def items(values, mass=None) -> ItemSet:
    ids = np.arange(len(values))
    columns = {"obs": np.asarray(values, dtype=np.float32).reshape(-1, 1)}
    return ItemSet("prioritized", columns, ids, ids, ids, mass=mass)


def test_rows_ignore_shard_order_and_see_priorities():
    one = rows([items([1.0, 2.0, 3.0], mass=np.array([0.5, 1.0, 2.0]))])
    split = rows([items([3.0], mass=np.array([2.0])), items([]), items([1.0, 2.0], np.ones(2))])
    assert len(one) == len(split) == 3
    assert one != split  # item 1.0 has another priority mass
    moved = rows([items([3.0], mass=np.array([2.0])), items([2.0, 1.0], np.array([1.0, 0.5]))])
    assert moved == one


def test_resize_seconds_keys_repeats_and_targets():
    events = [
        {"what": "collectors", "from": 1, "to": 3, "seconds": 2.0},
        {"what": "world_size", "from": 1, "to": 2, "seconds": 9.0},
        {"what": "collectors", "from": 1, "to": 3, "seconds": 1.0},
        {"what": "shards", "from": 2, "to": 1, "seconds": 30.0},  # no target for shards
    ]
    assert resize_seconds(events) == {
        "collectors 1->3": 2.0,
        "world_size 1->2": 9.0,
        "collectors 1->3#2": 1.0,
        "shards 2->1": 30.0,
    }
    assert targets_met(events)
    assert not targets_met([*events, {"what": "collectors", "seconds": 5.0}])
    assert not targets_met([{"what": "world_size", "seconds": 15.5}])


def test_size_key_and_rate():
    assert size_key(2, 3, 1) == "2/3/1"
    assert rate((0.0, 0), (4.0, 1000)) == 250.0
    assert rate((1.0, 5), (1.0, 5)) == 0.0  # an empty window does not divide by zero
