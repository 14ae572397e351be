"""The replay client's pure parts, without Ray: reply merging, the prefetch queue, held updates."""

import numpy as np
import pytest

from replay.health import shard_names
from replay.sampling.prefetch import PrefetchQueue
from replay.sampling.priorities import HeldUpdates
from replay.sampling.sharding import PendingSample, merge_replies


def part(actions, probability=None):
    out = {"action": np.asarray(actions), "index": np.arange(len(actions))}
    if probability is not None:
        out["probability"] = np.asarray(probability, dtype=np.float64)
    return out


def prioritized(size, mass, min_mass):
    return {"sampler": "prioritized", "size": size, "mass": mass, "min_mass": min_mass}


def test_merge_labels_shards_and_scales_probabilities_to_the_whole_service():
    shares = np.array([0.25, 0.75])
    replies = [
        (part([1, 2], [0.5, 0.5]), prioritized(2, 4.0, 2.0)),
        (part([7], [0.1]), prioritized(10, 10.0, 0.5)),
    ]
    batch, min_probability = merge_replies(replies, shares)
    assert batch["action"].tolist() == [1, 2, 7]
    assert batch["shard"].tolist() == [0, 0, 1]
    np.testing.assert_allclose(batch["probability"], [0.125, 0.125, 0.075])
    assert min_probability == pytest.approx(min(0.25 * 2.0 / 4.0, 0.75 * 0.5 / 10.0))
    assert "shard" not in replies[0][0]  # the replies are left as they came


def test_merge_skips_missing_shards_and_appends_the_redrawn_part():
    shares = np.array([0.5, 0.5])
    extra = ({**part([9], [0.2]), "shard": np.array([1])}, 0.01)
    replies = [None, (part([3], [0.4]), prioritized(4, 8.0, 1.0))]
    batch, min_probability = merge_replies(replies, shares, extra)
    assert batch["action"].tolist() == [3, 9] and batch["shard"].tolist() == [1, 1]
    assert min_probability == 0.01
    assert merge_replies([None, None], shares) == ({}, np.inf)


def test_merge_ignores_empty_and_unasked_shards_for_the_minimum():
    shares = np.array([0.0, 1.0])
    replies = [(part([]), prioritized(5, 5.0, 0.1)), (part([4], [1.0]), prioritized(0, 0.0, 0.0))]
    batch, min_probability = merge_replies(replies, shares)
    assert batch["shard"].tolist() == [1] and min_probability == np.inf


def test_merge_orders_fifo_rows_by_pass():
    fifo = {"sampler": "fifo", "size": 3}
    replies = [
        ({"index": np.array([0, 1]), "fifo_pass": np.array([1, 2])}, fifo),
        ({"index": np.array([5, 6]), "fifo_pass": np.array([1, 2])}, fifo),
    ]
    batch, _ = merge_replies(replies, np.array([0.5, 0.5]))
    assert batch["fifo_pass"].tolist() == [1, 1, 2, 2]
    assert batch["index"].tolist() == [0, 5, 1, 6] and batch["shard"].tolist() == [0, 1, 0, 1]


def pending(num_batches):
    return PendingSample(4, num_batches, np.zeros(2), np.zeros(2), [])


def test_prefetch_queue_requests_a_new_group_only_when_short():
    queue = PrefetchQueue()
    assert queue.to_request(prefetch=0) == 1 and queue.to_request(prefetch=3) == 4
    queue.inflight.append(pending(4))
    assert queue.ahead == 4 and queue.to_request(prefetch=3) == 0
    queue.inflight.popleft()
    queue.unpack({"index": np.arange(8)}, 0.5, num_batches=4, rng=None)
    queue.pop()
    assert queue.ahead == 3 and queue.to_request(prefetch=3) == 3  # 2 would stay ahead


def test_prefetch_queue_unpacks_groups_in_order_or_shuffled():
    queue = PrefetchQueue()
    queue.unpack({"index": np.arange(6)}, 0.25, num_batches=3, rng=None)
    assert [queue.pop()[0]["index"].tolist() for _ in range(3)] == [[0, 1], [2, 3], [4, 5]]
    queue.unpack({"index": np.arange(6)}, 0.25, num_batches=2, rng=np.random.default_rng(0))
    first, second = queue.pop(), queue.pop()
    assert first[1] == 0.25 and len(first[0]["index"]) == 3
    assert sorted([*first[0]["index"], *second[0]["index"]]) == list(range(6))


def test_prefetch_queue_knows_batches_of_another_size():
    queue = PrefetchQueue()
    queue.batch_size = 32
    assert not queue.holds_other(16)  # nothing queued
    queue.inflight.append(pending(1))
    assert queue.holds_other(16) and not queue.holds_other(32)
    queue.clear()
    assert queue.ahead == 0 and queue.batch_size is None


def test_held_updates_group_by_shard_and_concatenate_in_order():
    held = HeldUpdates(3)
    held.add({"shard": [2, 0, 2], "index": [1, 2, 3], "insertion_id": [4, 5, 6]}, [0.1, 0.2, 0.3])
    held.add({"shard": [2], "index": [9], "insertion_id": [10]}, np.array([[0.9]]))
    assert held.holds(2) and held.holds(0) and not held.holds(1)
    index, insertion_id, priority = held.take(2)
    assert index.tolist() == [1, 3, 9] and insertion_id.tolist() == [4, 6, 10]
    assert priority.tolist() == [0.1, 0.3, 0.9] and priority.dtype == np.float64
    assert held.take(2) is None and held.take(1) is None
    held.drop(0)
    assert not held.holds(0)


def test_held_updates_refuse_mismatched_lengths():
    held = HeldUpdates(1)
    with pytest.raises(ValueError, match="2 priorities for 3 items"):
        held.add({"shard": [0, 0, 0], "index": [0, 1, 2], "insertion_id": [0, 1, 2]}, [1.0, 2.0])
    assert not held.holds(0)
    held.add({"shard": [0], "index": [0], "insertion_id": [0]}, [1.0])
    held.clear()
    assert held.take(0) is None


def test_shard_names():
    assert shard_names([3, 1]) == "replay-1, replay-3"
    assert shard_names({}) == "none"
