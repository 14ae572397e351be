"""Sum-tree, prioritized and FIFO samplers against brute-force references (no Ray)."""

import numpy as np
import pytest

from replay.sampling.samplers import EmptyReplayError, importance_weights
from replay.sampling.sumtree import SumMinTree
from replay.table import ReplayTable


def items(start, n):
    return {"obs": np.arange(start, start + n, dtype=np.float32)[:, None].repeat(2, axis=1)}


@pytest.mark.parametrize("capacity", [1, 7, 1024, 1025, 40_000])
def test_find_matches_brute_force_prefix_search(capacity):
    rng = np.random.default_rng(capacity)
    tree = SumMinTree(capacity)
    filled = max(1, capacity - 3)  # leave a few leaves unset at the end
    tree.update(np.arange(filled), rng.random(filled) + 0.01)
    for _ in range(5):
        slots = rng.choice(filled, size=min(filled, 100), replace=False)
        tree.update(slots, rng.random(len(slots)) * 10)
    leaves = tree.leaves(filled)
    np.testing.assert_allclose(tree.total, leaves.sum(), rtol=1e-12)
    assert tree.min == leaves.min()
    prefix = rng.random(20_000) * tree.total
    prefix[:2] = [0.0, np.nextafter(tree.total, 0)]
    found = tree.find(prefix)
    expected = np.minimum(np.searchsorted(np.cumsum(leaves), prefix, side="right"), filled - 1)
    assert found.max() < filled  # never an unset leaf
    assert np.mean(found == expected) > 0.999  # equal but for float ties at boundaries
    assert np.all(tree[found] > 0)


def test_zero_mass_leaves_are_never_found():
    tree = SumMinTree(3000)
    tree.update(np.array([5, 2999]), np.array([1.0, 3.0]))
    found = tree.find(np.linspace(0, tree.total, 1001)[:-1])
    assert set(found.tolist()) == {5, 2999}
    assert np.sum(found == 5) == 250


def test_rebuild_from_leaves_is_bit_identical_to_incremental_updates():
    rng = np.random.default_rng(0)
    tree = SumMinTree(70_000)
    tree.update(np.arange(70_000), rng.random(70_000))
    for _ in range(30):
        slots = rng.choice(70_000, size=rng.integers(1, 2_000), replace=False)
        tree.update(slots, rng.random(len(slots)) ** 3)
    rebuilt = SumMinTree(70_000)
    rebuilt.rebuild(tree.leaves())
    for ours, theirs in zip(
        tree.sums + tree.mins + tree.running,
        rebuilt.sums + rebuilt.mins + rebuilt.running,
        strict=True,
    ):
        assert np.array_equal(ours, theirs)
    assert tree.total == rebuilt.total


def brute_force(masses, beta):
    probabilities = masses / masses.sum()
    weights = (len(masses) * probabilities) ** -beta
    return probabilities, weights / weights.max()


def test_prioritized_frequencies_and_weights_match_brute_force():
    rng = np.random.default_rng(1)
    table = ReplayTable(capacity=64, sampler="prioritized", alpha=0.7, seed=5)
    table.write(items(0, 100), "w", 0)  # wraps: slots hold items 36..99
    sampled = table.sample(64)
    priorities = rng.random(64) * 5 + 0.05
    table.update_priorities(np.arange(64), table.insertion_ids, priorities)
    masses = priorities**0.7
    probabilities, weights = brute_force(masses, beta=0.6)

    draws = 400_000
    batch = table.sample(draws, beta=0.6)
    counts = np.bincount(batch["index"], minlength=64)
    expected = draws * probabilities
    z = (counts - expected) / np.sqrt(expected * (1 - probabilities))
    assert np.abs(z).max() < 5.0  # every slot's frequency within 5 standard deviations
    np.testing.assert_allclose(batch["probability"], probabilities[batch["index"]], rtol=1e-12)
    np.testing.assert_allclose(batch["weight"], weights[batch["index"]], rtol=1e-6)
    np.testing.assert_array_equal(batch["obs"][:, 0], batch["insertion_id"].astype(np.float32))
    assert sampled["insertion_id"].min() >= 36


def test_importance_weights_formula():
    weights = importance_weights(np.array([0.5, 0.25, 0.125]), 0.125, beta=1.0)
    np.testing.assert_array_equal(weights, np.array([0.25, 0.5, 1.0], dtype=np.float32))


def test_new_items_get_the_largest_priority_seen():
    table = ReplayTable(capacity=10, sampler="prioritized", alpha=1.0, seed=0)
    table.write(items(0, 2), "w", 0)
    table.update_priorities(np.array([0, 1]), np.array([0, 1]), np.array([4.0, 0.5]))
    table.write(items(2, 1), "w", 1)
    np.testing.assert_array_equal(table.sampler.masses(np.arange(3)), [4.0, 0.5, 4.0])


def test_stale_priority_update_is_dropped():
    table = ReplayTable(capacity=4, sampler="prioritized", alpha=1.0, seed=0)
    table.write(items(0, 4), "w", 0)
    batch = table.sample(16)
    table.write(items(4, 2), "w", 1)  # overwrites slots 0 and 1 (insertion ids 4 and 5)
    keep = np.unique(batch["index"], return_index=True)[1]
    applied = table.update_priorities(
        batch["index"][keep], batch["insertion_id"][keep], np.full(len(keep), 9.0)
    )
    stale = np.isin(batch["index"][keep], [0, 1])
    assert applied == int((~stale).sum()) and table.stale_updates == int(stale.sum()) > 0
    masses = table.sampler.masses(np.arange(4))
    assert masses[0] == masses[1] == 1.0  # the successors kept their own (initial) priority
    assert np.all(masses[2:][np.isin([2, 3], batch["index"])] == 9.0)


def test_priority_update_refuses_bad_values():
    table = ReplayTable(capacity=4, sampler="prioritized")
    table.write(items(0, 2), "w", 0)
    with pytest.raises(ValueError, match="priorities"):
        table.update_priorities(np.array([0]), np.array([0]), np.array([-1.0]))
    with pytest.raises(ValueError, match="slots"):
        table.update_priorities(np.array([7]), np.array([0]), np.array([1.0]))
    with pytest.raises(ValueError, match="uniform"):
        ReplayTable(capacity=4).update_priorities(np.array([0]), np.array([0]), np.array([1.0]))


@pytest.mark.parametrize("shuffle", [False, True])
def test_fifo_hands_out_each_item_exactly_once_per_pass(shuffle):
    table = ReplayTable(capacity=100, sampler="fifo", fifo_shuffle=shuffle, seed=3)
    table.write(items(0, 30), "w", 0)
    first = np.concatenate([table.sample(n)["obs"][:, 0] for n in (7, 7, 7, 9)])
    assert sorted(first.tolist()) == list(range(30))
    if not shuffle:
        assert first.tolist() == list(range(30))  # oldest first
    assert table.info()["remaining"] == 0
    table.write(items(30, 5), "w", 1)  # joins the next pass
    second = table.sample(35)["obs"][:, 0]
    assert sorted(second.tolist()) == list(range(35))


def test_fifo_skips_items_overwritten_during_a_pass():
    table = ReplayTable(capacity=10, sampler="fifo", seed=0)
    table.write(items(0, 10), "w", 0)
    assert table.sample(4)["obs"][:, 0].tolist() == [0, 1, 2, 3]
    table.write(items(10, 3), "w", 1)  # overwrites items 0, 1, 2 (already handed out)
    table.write(items(13, 2), "w", 2)  # overwrites items 3, 4: item 4 was not handed out yet
    rest = table.sample(5)["obs"][:, 0].tolist()
    assert rest[:5] == [5, 6, 7, 8, 9]
    assert sorted(table.sample(10)["obs"][:, 0].tolist()) == list(range(5, 15))


@pytest.mark.parametrize("sampler", ["uniform", "prioritized", "fifo"])
def test_every_sampler_refuses_an_empty_table(sampler):
    with pytest.raises(EmptyReplayError):
        ReplayTable(capacity=4, sampler=sampler).sample(1)
