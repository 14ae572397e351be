"""Dump/load of a replay table: bit-exact round trips and refusal of damaged files (no Ray)."""

import json

import numpy as np
import pytest

from replay.persist.checkpoint import dump_table, load_table
from replay.persist.npyio import CheckpointError
from replay.storage import SchemaError
from replay.table import ReplayTable


def transitions(start, n):
    ids = np.arange(start, start + n)
    return {
        "observation": np.stack([ids, -ids], axis=1).astype(np.float32),
        "pixels": (ids[:, None, None] % 251).astype(np.uint8).repeat(3, 1).repeat(2, 2),
        "action": ids % 3,
        "terminated": ids % 5 == 0,
    }


def filled_table(sampler, tmp_path=None, **kwargs):
    mmap_dir = None if tmp_path is None else tmp_path / "live"
    table = ReplayTable(50, shard_id=1, sampler=sampler, seed=9, mmap_dir=mmap_dir, **kwargs)
    rng = np.random.default_rng(0)
    for seq in range(4):
        table.write(transitions(seq * 17, 17), f"collector-{seq % 2}", seq // 2)
    table.write(transitions(0, 17), "collector-0", 1)  # a retry: acknowledged, not stored
    batch = table.sample(40)
    if sampler == "prioritized":
        table.update_priorities(batch["index"], batch["insertion_id"], rng.random(40) * 3)
    return table


def assert_same(a, b):
    assert a.stats() == b.stats()
    assert a.storage.cursor == b.storage.cursor and len(a) == len(b)
    for key, column in a.storage.columns.items():
        assert np.array_equal(column[: len(a)], b.storage.columns[key][: len(b)])
        assert column.dtype == b.storage.columns[key].dtype
    assert np.array_equal(a.insertion_ids, b.insertion_ids)
    if a.sampler.kind == "prioritized":
        for ours, theirs in zip(a.sampler.tree.sums, b.sampler.tree.sums, strict=True):
            assert np.array_equal(ours, theirs)
        assert a.sampler.tree.min == b.sampler.tree.min
    for x, y in [(a.sample(33, beta=0.5), b.sample(33, beta=0.5)) for _ in range(3)]:
        assert x.keys() == y.keys()
        for key in x:
            assert np.array_equal(x[key], y[key]), key


@pytest.mark.parametrize("sampler", ["uniform", "prioritized", "fifo"])
def test_round_trip_is_bit_exact(sampler, tmp_path):
    table = filled_table(sampler, fifo_shuffle=True) if sampler == "fifo" else filled_table(sampler)
    written = dump_table(table, tmp_path / "ckpt")
    assert written["files"]["table.json"] > 0 and written["items"] == 50
    assert written["bytes"] == sum(p.stat().st_size for p in (tmp_path / "ckpt").iterdir())
    restored = load_table(tmp_path / "ckpt")
    assert_same(table, restored)
    # Dedup state survives: the retry is still a duplicate, the next seq is stored.
    assert restored.write(transitions(0, 17), "collector-1", 1).duplicate
    assert not restored.write(transitions(0, 2), "collector-1", 2).duplicate


def test_round_trip_with_memory_mapped_storage(tmp_path):
    table = filled_table("prioritized", tmp_path)
    assert (tmp_path / "live" / "data-0.npy").exists() is False  # live files are not the dump
    assert any((tmp_path / "live").iterdir())
    dump_table(table, tmp_path / "ckpt")
    restored = load_table(tmp_path / "ckpt", mmap_dir=tmp_path / "restored")
    assert restored.storage.directory == tmp_path / "restored"
    assert_same(table, restored)


def test_no_pickle_in_files(tmp_path):
    dump_table(filled_table("prioritized"), tmp_path)
    for path in tmp_path.glob("*.npy"):
        np.load(path, allow_pickle=False)
    meta = json.loads((tmp_path / "table.json").read_text())
    assert meta["sampler"]["meta"]["rng"]["bit_generator"] == "PCG64"


@pytest.mark.parametrize(
    ("damage", "name"),
    [
        ("truncate", "data-1.npy"),
        ("flip", "data-0.npy"),
        ("flip", "sampler-priority_mass.npy"),
        ("delete", "insertion_id.npy"),
        ("truncate", "table.json"),
    ],
)
def test_damaged_file_is_refused_naming_it(tmp_path, damage, name):
    dump_table(filled_table("prioritized"), tmp_path)
    path = tmp_path / name
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) - 7])
    elif damage == "flip":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    else:
        path.unlink()
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        load_table(tmp_path)


def test_schema_refusal_after_restore_stores_nothing(tmp_path):
    dump_table(filled_table("uniform"), tmp_path)
    table = load_table(tmp_path)
    bad = transitions(0, 3)
    bad["pixels"] = bad["pixels"].astype(np.int16)
    with pytest.raises(SchemaError, match="'pixels'"):
        table.write(bad, "collector-9", 0)
    assert table.write_count == 68 and "collector-9" not in table._last
