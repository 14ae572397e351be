"""Replay writes through shared memory: the block pool, and a real shard reading from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import ray

from replay.shard import remote_shard
from replay.shm import BlockViews, SharedBlocks, view_batch


def batch(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "observation": rng.integers(0, 256, size=(n, 84, 84, 4), dtype=np.uint8),
        "action": rng.integers(0, 6, size=n),
        "reward": rng.normal(size=n).astype(np.float32),
    }


def test_pool_places_reuses_refuses_and_unlinks(tmp_path):
    pool = SharedBlocks(max_bytes=2 << 20, directory=tmp_path)
    first = pool.put(batch(8))
    views = view_batch(BlockViews(), first.path, first.layout)
    for key, array in batch(8).items():
        np.testing.assert_array_equal(views[key], array)
        assert not views[key].flags.writeable
    assert pool.put(batch(8, seed=1)).path != first.path  # the first block is still in use
    assert pool.put(batch(8, seed=2)) is None  # at the size limit: send the ordinary way
    pool.release(first.block)
    again = pool.put(batch(8, seed=3))
    assert again.path == first.path and pool.nbytes == 2 << 20
    pool.close()
    assert not list(tmp_path.iterdir())


def test_shard_stores_a_shared_batch_once(ray_cluster):
    shard = remote_shard("shm-test", 0, 64, num_cpus=0)
    pool = SharedBlocks(max_bytes=8 << 20)
    try:
        assert ray.get(shard.node_id.remote()) == ray.get_runtime_context().get_node_id()
        data = batch(16)
        shared = pool.put(data)
        (receipt,) = ray.get(shard.write_shared_many.remote([(shared.path, shared.layout, "w", 0)]))
        assert receipt.num_items == 16 and not receipt.duplicate
        (retry,) = ray.get(shard.write_shared_many.remote([(shared.path, shared.layout, "w", 0)]))
        assert retry.duplicate and ray.get(shard.stats.remote())["size"] == 16
        pool.release(shared.block)
        pool.put(batch(16, seed=9))  # the block is rewritten: the shard kept its own copy
        stored, _ = ray.get(shard.sample.remote(64))
        rows = {bytes(obs.tobytes()) for obs in data["observation"]}
        assert all(obs.tobytes() in rows for obs in stored["observation"])
    finally:
        pool.close()
        ray.kill(shard, no_restart=True)
    assert not any(Path("/dev/shm").glob(f"{pool.prefix}*"))
