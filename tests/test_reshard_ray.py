"""Re-sharding on a local Ray: loading a checkpoint of another shard count, removing, adding."""

import collections

import numpy as np
import pytest
import ray

from replay.client import ReplayClient
from replay.config import ReplayConfig
from replay.persist.checkpoint import load_table
from replay.persist.items import take_items
from replay.shard import remote_shards


def items(start, n):
    ids = np.arange(start, start + n)
    return {"obs": np.stack([ids, -ids], axis=1).astype(np.float32), "version": ids // 10}


def contents(directory, count):
    """Rows (as tuples) and masses by row id of the ``replay-<i>`` tables in ``directory``."""
    rows, masses = collections.Counter(), {}
    for i in range(count):
        got = take_items(load_table(directory / f"replay-{i}"))
        for r in range(len(got)):
            rows[(*got.columns["obs"][r].tolist(), int(got.columns["version"][r]))] += 1
            masses[float(got.columns["obs"][r, 0])] = got.mass[r]
    return rows, masses


@pytest.fixture
def services(ray_cluster):
    started = []

    def start(name, num_shards, sampler="prioritized", capacity=600):
        config = ReplayConfig(capacity=capacity, num_shards=num_shards, sampler=sampler, num_cpus=0)
        shards = remote_shards(name, config, seed=4)
        started.extend(shards)
        return ReplayClient(shards, seed=1)

    yield start
    for shard in started:
        ray.kill(shard, no_restart=True)


def test_a_two_shard_checkpoint_loads_into_three_and_into_one(services, tmp_path):
    source = services("reshard-src", 2)
    for shard, n in enumerate([130, 170]):
        source.write(items(shard * 1000, n), f"writer-{shard}", 0, shard=shard)
    batch = source.sample(120)
    source.update_priorities(batch, np.linspace(0.2, 5.0, 120))
    source.dump(tmp_path / "ckpt")
    before = source.stats()
    rows, masses = contents(tmp_path / "ckpt", 2)
    for count in (3, 1):
        client = services(f"reshard-{count}", count)
        after = client.load(tmp_path / "ckpt")
        assert len(after) == count
        for key in ("size", "write_count", "sample_count", "priority_updates"):
            assert sum(s[key] for s in after) == sum(s[key] for s in before), key
        assert not list(tmp_path.glob(".reshard-*"))  # the re-sharded copy is gone
        client.dump(tmp_path / f"as-{count}")
        assert contents(tmp_path / f"as-{count}", count) == (rows, masses)
        got = client.sample(64, beta=0.5)
        assert len(got["obs"]) == 64 and set(got["shard"].tolist()) <= set(range(count))
        assert (got["weight"] > 0).all()


def test_removing_a_shard_drains_it_and_an_added_shard_takes_writes(services):
    client = services("reshard-live", 3, sampler="uniform", capacity=900)
    for shard, n in enumerate([100, 120, 90]):
        client.write(items(shard * 1000, n), f"writer-{shard}", 0, shard=shard)
    removed = client.shards[1]
    moved = client.remove_shards([1])
    assert moved == 120 and len(client.shards) == 2
    assert ray.get(removed.stats.remote())["size"] == 0
    assert sum(s["size"] for s in client.stats()) == 310
    seen = set()
    for _ in range(20):
        seen |= set(client.sample(50)["obs"][:, 0].tolist())
    assert any(1000 <= uid < 1120 for uid in seen)  # the drained items are sampled
    (extra,) = services("reshard-extra", 1, sampler="uniform", capacity=300).shards
    client.add_shards([extra])
    receipt = client.write(items(5000, 7), "newcomer", 0, shard=2)
    assert receipt.write_count == 7 and len(client.shards) == 3
    assert [s["size"] for s in client.stats()] == [160, 150, 7]
