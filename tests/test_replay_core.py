import numpy as np
import pytest
import torch

from replay.config import ReplayConfig
from replay.sampling.samplers import EmptyReplayError
from replay.storage import CircularStorage, SchemaError
from replay.table import ReplayTable


def items(start, n, dim=3):
    values = np.arange(start, start + n, dtype=np.float32)
    return {"obs": np.repeat(values[:, None], dim, axis=1), "act": np.arange(start, start + n)}


def test_storage_wraps_around_and_overwrites_oldest():
    storage = CircularStorage(capacity=5)
    assert storage.write(items(0, 3)).tolist() == [0, 1, 2]
    assert storage.write(items(3, 4)).tolist() == [3, 4, 0, 1]
    assert len(storage) == 5
    assert storage.data["act"].tolist() == [5, 6, 2, 3, 4]
    assert storage.data["obs"].dtype == torch.float32


def test_storage_batch_larger_than_capacity_keeps_the_tail():
    storage = CircularStorage(capacity=3)
    indices = storage.write(items(0, 5))
    assert indices.tolist() == [-1, -1, 2, 0, 1]
    assert sorted(storage.data["act"].tolist()) == [2, 3, 4]


@pytest.mark.parametrize(
    ("batch", "key"),
    [
        ({"obs": np.zeros((2, 4), np.float32), "act": np.zeros(2, np.int64)}, "obs"),
        ({"obs": np.zeros((2, 3), np.float64), "act": np.zeros(2, np.int64)}, "obs"),
        ({"obs": np.zeros((2, 3), np.float32)}, "act"),
        (
            {
                "obs": np.zeros((2, 3), np.float32),
                "act": np.zeros(2, np.int64),
                "extra": np.zeros(2),
            },
            "extra",
        ),
    ],
)
def test_schema_mismatch_is_refused_and_nothing_stored(batch, key):
    table = ReplayTable(capacity=10)
    table.write(items(0, 4), "w", 0)
    before = {k: v.clone() for k, v in table.storage.data.items()}
    with pytest.raises(SchemaError, match=repr(key)):
        table.write(batch, "w", 1)
    assert len(table) == 4 and table.write_count == 4
    for k, v in table.storage.data.items():
        assert torch.equal(v[:4], before[k][:4])


def test_sampling_stays_within_filled_slots():
    table = ReplayTable(capacity=100, seed=0)
    table.write(items(0, 7), "w", 0)
    batch = table.sample(5_000)
    assert batch["index"].min() >= 0 and batch["index"].max() < 7
    assert set(batch["act"].tolist()) == set(range(7))
    np.testing.assert_array_equal(batch["obs"][:, 0], batch["act"].astype(np.float32))


def test_sampling_empty_table_raises():
    with pytest.raises(EmptyReplayError):
        ReplayTable(capacity=4).sample(1)


def test_retried_write_is_acknowledged_not_stored_twice():
    table = ReplayTable(capacity=10, shard_id=3)
    first = table.write(items(0, 2), "collector-0/abc", 0)
    retry = table.write(items(0, 2), "collector-0/abc", 0)
    assert retry.duplicate and not first.duplicate
    assert retry.indices.tolist() == first.indices.tolist() and retry.shard_id == 3
    assert table.write_count == 2 and len(table) == 2
    other = table.write(items(2, 2), "collector-1/def", 0)
    assert not other.duplicate and table.write_count == 4


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"sampler": "lifo"}, "sampler"),
        ({"alpha": -0.1}, "alpha"),
        ({"beta_start": 1.5}, "beta_start"),
        ({"beta_end": -1.0}, "beta_end"),
        ({"beta_anneal_frames": -1}, "beta_anneal_frames"),
        ({"storage": "disk"}, "storage"),
        ({"storage": "mmap"}, "mmap_dir"),
    ],
)
def test_replay_config_refuses_bad_fields(overrides, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        ReplayConfig(**overrides)


def test_replay_config_anneals_beta_linearly():
    config = ReplayConfig(beta_start=0.4, beta_end=1.0, beta_anneal_frames=1_000)
    assert [config.beta(f) for f in (0, 500, 1_000, 5_000)] == pytest.approx([0.4, 0.7, 1.0, 1.0])
    assert ReplayConfig(beta_anneal_frames=0, beta_end=0.9).beta(0) == 0.9
    assert ReplayConfig(storage="mmap", mmap_dir="/tmp/x").storage == "mmap"
