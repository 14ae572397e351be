"""The replay service on a local Ray: two shards, the client's split, weights, updates, prefetch."""

import numpy as np
import pytest
import ray

from replay.client import ReplayClient
from replay.config import ReplayConfig
from replay.persist.npyio import CheckpointError
from replay.sampling.samplers import EmptyReplayError
from replay.shard import remote_shard, remote_shards
from replay.storage import SchemaError


def items(start, n):
    ids = np.arange(start, start + n)
    return {"obs": np.stack([ids, ids], axis=1).astype(np.float32), "action": ids}


@pytest.fixture
def service(ray_cluster, request):
    sampler = request.param
    config = ReplayConfig(capacity=400, num_shards=2, sampler=sampler, alpha=1.0, num_cpus=0)
    shards = remote_shards(f"svc-{sampler}", config, seed=3)
    yield ReplayClient(shards, seed=0)
    for shard in shards:
        ray.kill(shard, no_restart=True)


def fill(client, per_shard=(60, 140)):
    start = 0
    for shard, n in enumerate(per_shard):
        receipt = client.write(items(start, n), f"writer-{shard}", 0, shard=shard)
        assert receipt.shard_id == shard and receipt.write_count == n
        start += n


@pytest.mark.parametrize("service", ["prioritized"], indirect=True)
def test_prioritized_weights_are_exact_over_the_whole_service(service):
    client = service
    with pytest.raises(EmptyReplayError):
        client.sample(8)
    fill(client)
    first = client.sample(512)
    assert set(first["shard"].tolist()) == {0, 1}
    np.testing.assert_array_equal(first["obs"][:, 0], first["action"].astype(np.float32))
    # Give every item a known priority (alpha = 1: mass = priority), routed by shard.
    priority = {int(a): 0.5 + (a % 7) for a in range(200)}
    keys = {
        "shard": np.repeat([0, 1], [60, 140]),
        "index": np.concatenate([np.arange(60), np.arange(140)]),
        "insertion_id": np.concatenate([np.arange(60), np.arange(140)]),
    }
    client.update_priorities(keys, np.array([priority[a] for a in range(200)]))
    client.flush_updates(wait=True)
    client.refresh()  # the split uses fresh masses, so the draws follow the global distribution
    batch = client.sample(20_000, beta=0.4)
    masses = np.array([priority[a] for a in range(200)])
    probabilities = masses / masses.sum()
    expected = (200 * probabilities) ** -0.4 / ((200 * probabilities) ** -0.4).max()
    np.testing.assert_allclose(batch["probability"], probabilities[batch["action"]], rtol=1e-9)
    np.testing.assert_allclose(batch["weight"], expected[batch["action"]], rtol=1e-6)
    counts = np.bincount(batch["action"], minlength=200)
    z = (counts - 20_000 * probabilities) / np.sqrt(20_000 * probabilities)
    assert np.abs(z).max() < 5.0
    stats = client.stats()
    assert [s["priority_updates"] for s in stats] == [60, 140]


@pytest.mark.parametrize("service", ["prioritized"], indirect=True)
def test_stale_updates_are_dropped_and_deferred_updates_ride_on_samples(service):
    client = service
    fill(client, (50, 50))
    batch = client.sample(64)
    client.write(items(1000, 200), "writer-0", 1, shard=0)  # shard 0 wraps: its slots are reused
    client.update_priorities(batch, np.full(64, 5.0), defer=True)
    assert client.stats()[0]["stale_updates"] == 0  # still held by the client
    client.sample(4)  # carries the deferred updates
    stats = client.stats()
    from_shard = np.bincount(batch["shard"], minlength=2)
    unique_1 = len(np.unique(batch["index"][batch["shard"] == 1]))
    assert stats[0]["stale_updates"] == from_shard[0] and stats[0]["priority_updates"] == 0
    assert stats[1]["stale_updates"] == 0 and stats[1]["priority_updates"] == from_shard[1]
    info = ray.get(client.shards[1].info.remote())
    assert info["mass"] == pytest.approx(50 - unique_1 + 5.0 * unique_1)
    with pytest.raises(ValueError, match="priorities"):
        client.update_priorities(batch, np.full(64, -1.0))
        client.flush_updates(wait=True)


@pytest.mark.parametrize("service", ["uniform"], indirect=True)
def test_prefetch_returns_batches_of_the_asked_size_and_fetches_in_groups(service):
    client = service
    fill(client)
    batches = [client.sample(32, prefetch=3) for _ in range(7)]
    assert all(len(b["index"]) == 32 for b in batches)
    assert client.fetcher.queue.ahead >= 3
    sampled = sum(s["sample_count"] for s in client.stats())
    assert sampled == 32 * (4 + 3 + 3)  # three fetches: 1 + 3 batches, then 3, then 3
    assert client.sample(16, prefetch=0)["index"].shape == (16,)  # another size: queue dropped
    assert client.fetcher.queue.ahead == 0


@pytest.mark.parametrize("service", ["fifo"], indirect=True)
def test_fifo_over_two_shards_hands_out_each_item_once_per_pass(service):
    client = service
    fill(client, (30, 70))
    for _ in range(2):  # two passes, with prefetching across the pass boundary
        seen = np.concatenate([client.sample(20, prefetch=2)["action"] for _ in range(5)])
        assert sorted(seen.tolist()) == list(range(100))
    with pytest.raises(ValueError, match="fifo"):
        client.sample(7)
    client.cancel_prefetch()
    assert len(client.sample(7)["action"]) == 7  # nothing queued: any size
    assert len(client.sample(9)["action"]) == 9


@pytest.mark.parametrize("service", ["uniform"], indirect=True)
def test_dedup_and_schema_refusal_through_ray(service):
    client = service
    first = client.write(items(0, 5), "c0", 0, shard=1)
    retry = client.write(items(0, 5), "c0", 0, shard=1)
    assert retry.duplicate and retry.indices.tolist() == first.indices.tolist()
    bad = items(5, 5)
    bad["action"] = bad["action"].astype(np.int32)
    with pytest.raises(SchemaError, match="'action'"):
        client.write(bad, "c0", 1, shard=1)
    assert client.stats()[1]["write_count"] == 5


@pytest.mark.parametrize("service", ["prioritized"], indirect=True)
def test_checkpoint_of_two_shards_round_trips(service, tmp_path):
    client = service
    fill(client)
    batch = client.sample(100)
    client.update_priorities(batch, np.linspace(0.1, 3.0, 100), defer=True)
    dumps = client.dump(tmp_path)  # flushes the deferred updates first
    assert all("table.json" in d["files"] and d["bytes"] > 0 for d in dumps)
    before = client.stats()
    infos = client.refresh()
    others = remote_shards("svc-restored", ReplayConfig(capacity=10, sampler="uniform"), seed=7)
    try:
        restored = ReplayClient(others, seed=0)
        after = restored.load(tmp_path)
        assert after == before  # sizes, counters, sampler kind
        assert restored.infos == infos  # masses and minima are bit-identical
        a = ray.get([s.sample.remote(50) for s in client.shards])
        b = ray.get([s.sample.remote(50) for s in others])
        for (x, _), (y, _) in zip(a, b, strict=True):
            for key in x:
                np.testing.assert_array_equal(x[key], y[key])
        (tmp_path / "replay-1" / "data-0.npy").write_bytes(b"\x93NUMPY")
        with pytest.raises(CheckpointError, match=r"replay-1/data-0\.npy"):
            restored.load(tmp_path)
        kept = restored.stats()[1]  # a refused load keeps the current table
        assert (kept["size"], kept["write_count"]) == (before[1]["size"], before[1]["write_count"])
    finally:
        for shard in others:
            ray.kill(shard, no_restart=True)


def test_memory_mapped_shard(ray_cluster, tmp_path):
    shard = remote_shard("svc-mmap", 0, 100, mmap_dir=str(tmp_path))
    try:
        client = ReplayClient([shard], seed=0)
        client.write(items(0, 10), "w", 0)
        assert len(list(tmp_path.glob("shard-0-*/column-*.npy"))) == 2
        assert sorted(client.sample(10, prefetch=1)["action"].tolist())[0] >= 0
    finally:
        ray.kill(shard, no_restart=True)
