"""Re-sharding replay tables (no Ray): items, masses, FIFO passes, dedup and counters are exact."""

import collections
import zlib

import numpy as np
import pytest

from replay.persist.checkpoint import dump_table, load_table
from replay.persist.items import put_items, take_items
from replay.persist.npyio import CheckpointError
from replay.persist.reshard import deal, partition, reshard_checkpoint, reshard_tables
from replay.table import ReplayTable

CAPACITY = 40


def rows(start, n, version):
    uid = np.arange(start, start + n)
    return {
        "obs": np.stack([uid, -uid], axis=1).astype(np.float32),
        "action": uid % 3,
        "reward": (uid * 0.5).astype(np.float32),
        "version": np.full(n, version, dtype=np.int64),
        "n_step": (uid % 4 + 1).astype(np.int32),
    }


def old_tables(sampler, count, *, shuffle=False):
    """``count`` tables that wrapped, had priorities updated, and are mid-pass (FIFO)."""
    rng = np.random.default_rng(count)
    tables, uid = [], 0
    for i in range(count):
        table = ReplayTable(
            CAPACITY, shard_id=i, sampler=sampler, seed=i, alpha=0.7, fifo_shuffle=shuffle
        )
        for seq, n in enumerate([17, 13, 11 + 6 * i]):
            table.write(rows(uid, n, version=seq + i), f"writer-{i}-{seq % 2}", seq // 2)
            uid += n
        batch = table.sample(15)
        if sampler == "prioritized":
            table.update_priorities(batch["index"], batch["insertion_id"], rng.random(15) * 4)
        table.write(rows(uid, 9, version=7), f"writer-{i}-0", 1)  # wraps; joins the next pass
        uid += 9
        table.write(rows(0, 9, version=7), f"writer-{i}-0", 1)  # a retry: stores nothing
        tables.append(table)
    return tables


def contents(tables):
    """Every stored row of every table as a tuple of all columns, counted."""
    counted = collections.Counter()
    for table in tables:
        items = take_items(table)
        columns = [items.columns[k].reshape(len(items), -1) for k in sorted(items.columns)]
        counted.update(
            tuple(np.concatenate([c[r] for c in columns]).tolist()) for r in range(len(items))
        )
    return counted


def by_uid(tables, field):
    out = {}
    for table in tables:
        items = take_items(table)
        for uid, value in zip(items.columns["obs"][:, 0], getattr(items, field), strict=True):
            assert uid not in out
            out[float(uid)] = value
    return out


def reshard(old, num_new):
    """The service's capacity spread over ``num_new`` shards (rounded up: nothing dropped)."""
    capacity = -(-CAPACITY * len(old) // num_new)
    return reshard_tables(old, num_new, capacity_per_shard=capacity, seeds=range(num_new))


COUNTERS = ("write_count", "sample_count", "priority_updates", "stale_updates")
MOVES = [(1, 3), (3, 1), (2, 3), (3, 2), (2, 2)]


@pytest.mark.parametrize("sampler", ["uniform", "prioritized", "fifo"])
@pytest.mark.parametrize(("num_old", "num_new"), MOVES)
def test_items_counters_and_sampler_state_are_exact(sampler, num_old, num_new):
    old = old_tables(sampler, num_old)
    new = reshard(old, num_new)
    assert contents(new) == contents(old)  # every row once, version and n-step columns intact
    assert sum(map(len, new)) == sum(map(len, old))
    assert max(map(len, new)) - min(map(len, new)) <= 1  # dealt evenly
    for counter in COUNTERS:
        assert sum(t.stats()[counter] for t in new) == sum(t.stats()[counter] for t in old)
    for j, table in enumerate(new):
        assert table.shard_id == j and table.sampler.kind == sampler
        ids = table.insertion_ids[: len(table)]
        assert len(set(ids.tolist())) == len(table) and ids.max() < table.write_count
    if sampler == "prioritized":
        masses = by_uid(old, "mass")
        assert len(set(masses.values())) > 10  # updated priorities, not just the initial one
        assert by_uid(new, "mass") == masses  # exact floats, no alpha round trip
        assert {t.sampler.alpha for t in new} == {0.7}
        assert {t.sampler.max_priority for t in new} == {max(t.sampler.max_priority for t in old)}
        total = sum(t.sampler.tree.total for t in new)
        assert total == pytest.approx(sum(t.sampler.tree.total for t in old), rel=1e-12)
    if sampler == "fifo":
        assert by_uid(new, "pending") == by_uid(old, "pending")


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize(("num_old", "num_new"), MOVES)
def test_fifo_pending_items_are_handed_out_once_then_every_item_next_pass(
    shuffle, num_old, num_new
):
    old = old_tables("fifo", num_old, shuffle=shuffle)
    pending = {uid for uid, flag in by_uid(old, "pending").items() if flag}
    assert 0 < len(pending) < sum(map(len, old))
    new = reshard(old, num_new)
    handed = []
    for table in new:
        batch = table.sample(table.info()["remaining"])
        handed += batch["obs"][:, 0].tolist()
        assert set(batch["fifo_pass"].tolist()) <= {old[0].sampler.passes}
    assert sorted(handed) == sorted(pending) and len(handed) == len(set(handed))
    everything = [uid for table in new for uid in table.sample(len(table))["obs"][:, 0].tolist()]
    assert sorted(everything) == sorted(by_uid(old, "writes_ago"))


@pytest.mark.parametrize(("num_old", "num_new"), MOVES)
def test_a_resharded_queue_hands_out_only_the_chunks_never_taken(num_old, num_new):
    old = []
    for i in range(num_old):
        table = ReplayTable(CAPACITY, shard_id=i, sampler="fifo", fifo_queue=True, seed=i)
        table.write(rows(100 * i, 12, 0), "w", 0)
        table.sample(5)  # the 5 oldest went to a learner round
        old.append(table)
    queued = {100 * i + k for i in range(num_old) for k in range(5, 12)}
    new = reshard(old, num_new)
    assert sum(t.write_count for t in new) == 12 * num_old  # the writes are still counted
    handed = [uid for table in new for uid in table.sample(CAPACITY)["obs"][:, 0].tolist()]
    assert sorted(handed) == sorted(queued)  # each queued chunk once, no taken one again
    assert all(table.info()["remaining"] == 0 for table in new)


@pytest.mark.parametrize(("num_old", "num_new"), MOVES)
def test_writers_receipts_follow_them_to_their_default_shard(num_old, num_new):
    old = old_tables("uniform", num_old)
    new = reshard(old, num_new)
    for i, table in enumerate(old):
        for writer, receipt in table._last.items():
            j = zlib.crc32(writer.encode()) % num_new
            assert writer in new[j]._last
            again = new[j].write(rows(10_000, 1, 0), writer, receipt.seq)
            assert again.duplicate and again.seq == receipt.seq
            # The indices name where the write's surviving items landed in that shard.
            first = receipt.write_count - len(receipt.indices)
            alive = [
                int(old[i].storage.columns["obs"][s, 0])
                for k, s in enumerate(receipt.indices)
                if s >= 0 and old[i].insertion_ids[s] == first + k
            ]
            landed = new[j].storage.columns["obs"][again.indices, 0].tolist()
            here = set(take_items(new[j]).columns["obs"][:, 0].tolist())
            assert sorted(landed) == sorted(uid for uid in alive if uid in here)
            assert not new[j].write(rows(10_000, 1, 0), writer, receipt.seq + 1).duplicate


def test_the_newest_receipt_of_a_writer_seen_by_two_shards_wins():
    old = [ReplayTable(10, shard_id=i, seed=i) for i in range(2)]
    old[0].write(rows(0, 2, 0), "roamer", 3)
    old[1].write(rows(2, 2, 0), "roamer", 5)  # failed over to the other shard later
    (new,) = reshard_tables(old, 1, capacity_per_shard=10, seeds=[0])
    assert new._last["roamer"].seq == 5
    assert new.write(rows(9, 1, 0), "roamer", 4).duplicate


def test_overflow_drops_the_oldest_and_deal_skips_full_shards():
    old = old_tables("uniform", 3)
    ages = by_uid(old, "writes_ago")
    parts = partition([take_items(t) for t in old], 2, [30, 20])
    assert [len(p) for p in parts] == [30, 20]
    kept = {uid for p in parts for uid in p.columns["obs"][:, 0].tolist()}
    dropped = set(ages) - kept
    assert len(dropped) == sum(map(len, old)) - 50
    assert min(ages[u] for u in dropped) >= max(ages[u] for u in kept)
    assert deal(7, [2, 4, 4]).tolist() == [0, 1, 2, 0, 1, 2, 1]
    assert deal(5, [0, 3]).tolist() == [1, 1, 1]


def test_put_items_joins_the_running_pass_of_a_table_that_holds_items():
    (donor,) = old_tables("fifo", 1)
    keeper = ReplayTable(100, sampler="fifo", seed=5)
    keeper.write(rows(1000, 30, 0), "k", 0)
    first = keeper.sample(10)["obs"][:, 0].tolist()  # a pass of 30 items is under way
    keeper.write(rows(2000, 5, 0), "k", 1)  # joins the next pass
    pending = {u for u, flag in by_uid([donor], "pending").items() if flag}
    assert (put_items(keeper, take_items(donor)) >= 0).all()
    rest = keeper.sample(keeper.info()["remaining"])["obs"][:, 0].tolist()
    assert sorted(rest) == sorted(pending | set(range(1000, 1030)) - set(first))
    next_pass = keeper.sample(len(keeper))["obs"][:, 0].tolist()
    assert sorted(next_pass) == sorted(take_items(keeper).columns["obs"][:, 0].tolist())
    assert len(set(next_pass)) == 75


def test_reshard_checkpoint_rewrites_directories_and_refuses_a_corrupt_file(tmp_path):
    old = old_tables("prioritized", 2)
    for i, table in enumerate(old):
        dump_table(table, tmp_path / "ckpt" / f"replay-{i}")
    counts = reshard_checkpoint(
        tmp_path / "ckpt", 2, 3, tmp_path / "new", capacity_per_shard=CAPACITY, seeds=[1, 2, 3]
    )
    size = sum(map(len, old))
    assert counts == {"items_before": size, "items_after": size, "dropped": 0}
    new = [load_table(tmp_path / "new" / f"replay-{j}") for j in range(3)]
    assert contents(new) == contents(old) and by_uid(new, "mass") == by_uid(old, "mass")
    (tmp_path / "ckpt" / "replay-1" / "data-2.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(CheckpointError, match=r"replay-1/data-2\.npy"):
        reshard_checkpoint(
            tmp_path / "ckpt", 2, 1, tmp_path / "again", capacity_per_shard=99, seeds=[0]
        )


def test_frame_deduplicated_tables_are_refused():
    table = ReplayTable(16, sampler="uniform", seed=0, frame_stack=4)
    with pytest.raises(ValueError, match=r"frame-deduplicated replay \(replay.frame_stack"):
        reshard_tables([table], 2, capacity_per_shard=8, seeds=[0, 1])


def test_mixed_samplers_and_schemas_are_refused():
    uniform, prioritized = ReplayTable(8, seed=0), ReplayTable(8, sampler="prioritized", seed=0)
    with pytest.raises(ValueError, match="samplers"):
        reshard_tables([uniform, prioritized], 1, capacity_per_shard=8, seeds=[0])
    other = ReplayTable(8, seed=1)
    uniform.write(rows(0, 2, 0), "a", 0)
    other.write({**rows(2, 2, 0), "version": np.zeros(2, np.int32)}, "b", 0)
    with pytest.raises(ValueError, match="schemas"):
        reshard_tables([uniform, other], 1, capacity_per_shard=8, seeds=[0])
