"""Benchmark of the replay service on a local Ray: ``python -m replay.bench``.

Runs the service with 1 and 2 shards, in one process tree, on CartPole-sized transitions (the
collector's schema: 4-float observations, 54 bytes) and Atari-sized ones (84x84x4 uint8
observation and next observation, 56 KB: the 50,000-item table holds 2.8 GB), and measures,
each for a second or two:

* inserts/s: the driver writes batches (``--small-write`` / ``--atari-write`` transitions per
  write, as collectors do) to the shards of a prioritized table, keeping 8 writes in flight:
  ``fill_*`` while filling the empty table (allocation included), ``insert_*`` for a few
  seconds more into the full table, the state a replay spends its life in (uniform tables:
  fill only);
* sampled items/s: batches of 256, uniform and prioritized, as a learner draws them with
  ``ReplayClient.sample(256, prefetch=k)`` (``--prefetch`` batches kept ahead, fetched ``k``
  at a time: one call per shard per ``k`` batches);
* priority updates/s: ``update_priorities`` of sampled 256-item batches, as fast as the client
  routes them (calls coalesce while the previous one to a shard is in flight), until applied;
* checkpoint write and read MB/s of the 2-shard Atari table (``ReplayClient.dump`` / ``load``:
  every shard in parallel, files fsynced; the page cache is dropped before reading), next to the raw
  sequential write speed of the same disk (one fsynced file of up to 750 MB, timed right before
  and after the 2-shard checkpoint, averaged), measured in the same run.

Progress goes to stderr; the last stdout line is one JSON object. Keys without a suffix are the
2-shard figures, ``*_1shard`` the 1-shard ones.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import ray

from replay.client import ReplayClient
from replay.local_ray import init_local_ray
from replay.shard import remote_shard

logger = logging.getLogger("replay.bench")

BATCH = 256
WRITES_IN_FLIGHT = 8
DISK_PROBE_BYTES = 750_000_000


def small_batch(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """CartPole-sized transitions with the collector's keys."""
    return {
        "observation": rng.normal(size=(n, 4)).astype(np.float32),
        "action": rng.integers(0, 2, size=n),
        "reward": np.ones(n, dtype=np.float32),
        "next_observation": rng.normal(size=(n, 4)).astype(np.float32),
        "terminated": rng.random(n) < 0.05,
        "truncated": np.zeros(n, dtype=bool),
        "policy_version": np.zeros(n, dtype=np.int64),
    }


def atari_batch(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Atari-sized transitions: 84x84x4 uint8 observation and next observation."""
    batch = small_batch(n, rng)
    batch["observation"] = rng.integers(0, 256, size=(n, 84, 84, 4), dtype=np.uint8)
    batch["next_observation"] = rng.integers(0, 256, size=(n, 84, 84, 4), dtype=np.uint8)
    batch["action"] = rng.integers(0, 18, size=n)
    return batch


def start_shards(tag: str, num_shards: int, capacity: int, sampler: str) -> list:
    """Starts ``num_shards`` shards holding ``capacity`` items in all."""
    shards = [
        remote_shard(f"bench-{tag}", i, capacity // num_shards, sampler=sampler, seed=i)
        for i in range(num_shards)
    ]
    ray.get([s.info.remote() for s in shards])
    return shards


def stop(shards: list) -> None:
    """Kills benchmark shards."""
    for shard in shards:
        ray.kill(shard, no_restart=True)


class Writer:
    """Writes benchmark batches round-robin over the shards, as one writer per shard."""

    def __init__(self, client: ReplayClient, batches: list[dict]) -> None:
        self.client, self.batches, self.writes = client, batches, 0

    def run(self, *, items: int = 0, seconds: float = 0.0) -> float:
        """Writes ``items`` transitions or for ``seconds``, 8 writes in flight; returns items/s."""
        num_shards = len(self.client.shards)
        write_size = len(self.batches[0]["reward"])
        pending, written = [], 0
        start = time.perf_counter()
        while written < items or time.perf_counter() - start < seconds:
            shard, seq = self.writes % num_shards, self.writes // num_shards
            batch = self.batches[self.writes % len(self.batches)]
            pending.append(self.client.write_async(batch, f"bench-{shard}", seq, shard=shard))
            self.writes += 1
            written += write_size
            if len(pending) >= WRITES_IN_FLIGHT:
                ray.get(pending.pop(0))
        ray.get(pending)
        return written / (time.perf_counter() - start)


def sample_rate(client: ReplayClient, seconds: float, prefetch: int) -> float:
    """Samples batches of 256 for ``seconds``; returns items/s."""
    client.sample(BATCH, beta=0.5)
    items, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        items += len(client.sample(BATCH, beta=0.5, prefetch=prefetch)["index"])
    elapsed = time.perf_counter() - start
    client.cancel_prefetch()
    return items / elapsed


def update_rate(client: ReplayClient, seconds: float) -> float:
    """``update_priorities`` of sampled 256-item batches for ``seconds``; returns updates/s.

    The clock stops once every update has been applied by its shard.
    """
    rng = np.random.default_rng(0)
    keys = client.sample(BATCH)
    items, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        client.update_priorities(keys, rng.random(BATCH) + 0.1)
        items += BATCH
    client.flush_updates(wait=True)
    return items / (time.perf_counter() - start)


def drop_page_cache(root: Path) -> None:
    """Evicts the (fsynced, clean) pages of every file under ``root`` from the page cache."""
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def disk_write_rate(directory: Path, nbytes: int) -> float:
    """Raw sequential write of one fsynced file of ``nbytes``; returns MB/s."""
    block = np.random.default_rng(0).integers(0, 256, size=32 << 20, dtype=np.uint8)
    path = directory / "disk-speed.bin"
    start = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(max(1, round(nbytes / block.nbytes))):
            f.write(memoryview(block))
        f.flush()
        os.fsync(f.fileno())
        size = f.tell()
    rate = size / 1e6 / (time.perf_counter() - start)
    path.unlink()
    return rate


def checkpoint_rates(client: ReplayClient, directory: Path) -> tuple[float, float, float]:
    """Dumps and loads the service; returns ``(write MB/s, read MB/s, MB)``."""
    before = client.stats()
    start = time.perf_counter()
    dumps = client.dump(directory)
    write_s = time.perf_counter() - start
    megabytes = sum(d["bytes"] for d in dumps) / 1e6
    drop_page_cache(directory)
    start = time.perf_counter()
    after = client.load(directory)
    read_s = time.perf_counter() - start
    keys = ("size", "write_count", "sample_count")
    if [[s[k] for k in keys] for s in before] != [[s[k] for k in keys] for s in after]:
        raise RuntimeError(f"restore changed the counters: {before} -> {after}")
    return megabytes / write_s, megabytes / read_s, megabytes


def fill_and_insert(client: ReplayClient, batches: list[dict], capacity: int, args) -> tuple:
    """``(fill rate, steady insert rate)`` in items/s.

    The fill rate covers filling the empty table (its allocation included); the steady rate,
    writing for ``args.seconds`` more into the full table (overwriting its oldest items).
    """
    writer = Writer(client, batches)
    return writer.run(items=capacity), writer.run(seconds=args.seconds)


def run_shards(num_shards: int, args, results: dict, directory: Path) -> None:
    """All measurements for one shard count; figures go into ``results``."""
    suffix = "" if num_shards == 2 else f"_{num_shards}shard"
    rng = np.random.default_rng(num_shards)

    def record(key: str, value: float) -> None:
        results[key + suffix] = round(value, 1)
        logger.info("%d shard(s): %s = %s", num_shards, key, f"{value:,.1f}")

    small = [small_batch(args.small_write, rng) for _ in range(4)]
    for sampler in ("prioritized", "uniform"):
        shards = start_shards(f"s{num_shards}-{sampler}", num_shards, args.small_capacity, sampler)
        client = ReplayClient(shards, seed=0)
        try:
            if sampler == "prioritized":
                fill, insert = fill_and_insert(client, small, args.small_capacity, args)
                record("fill_small_per_s", fill)
                record("insert_small_per_s", insert)
            else:
                record(
                    "fill_small_uniform_per_s", Writer(client, small).run(items=args.small_capacity)
                )
            rate = sample_rate(client, args.seconds, args.prefetch)
            record(f"sample_{sampler}_small_per_s", rate)
            if sampler == "prioritized":
                record("priority_updates_per_s", update_rate(client, args.seconds))
        finally:
            stop(shards)

    atari = [atari_batch(args.atari_write, rng) for _ in range(2)]
    shards = start_shards(f"a{num_shards}", num_shards, args.atari_capacity, "prioritized")
    client = ReplayClient(shards, seed=0)
    try:
        fill, insert = fill_and_insert(client, atari, args.atari_capacity, args)
        record("fill_atari_per_s", fill)
        record("insert_atari_per_s", insert)
        record("sample_prioritized_atari_per_s", sample_rate(client, args.seconds, args.prefetch))
        if num_shards == 2:  # (1 shard: skipped, it would double the run's longest part)
            # The disk is shared and its speed drifts: raw writes are timed right before and
            # after the checkpoint, and the checkpoint is compared with their mean.
            nbytes = min(sum(s["bytes"] for s in client.stats()), DISK_PROBE_BYTES)
            disk = disk_write_rate(directory, nbytes)
            write, read, megabytes = checkpoint_rates(client, directory / "ckpt")
            disk = (disk + disk_write_rate(directory, nbytes)) / 2
            record("disk_write_mb_s", disk)
            record("checkpoint_write_mb_s", write)
            record("checkpoint_read_mb_s", read)
            record("checkpoint_mb", megabytes)
    finally:
        stop(shards)
        shutil.rmtree(directory / "ckpt", ignore_errors=True)


def main(argv: list[str] | None = None) -> dict:
    """Runs the benchmark and prints the JSON summary as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small-capacity", type=int, default=1_000_000)
    parser.add_argument("--atari-capacity", type=int, default=50_000)
    parser.add_argument("--small-write", type=int, default=1024, help="transitions per write")
    parser.add_argument("--atari-write", type=int, default=64, help="transitions per write")
    parser.add_argument("--prefetch", type=int, default=4, help="sample requests kept in flight")
    parser.add_argument("--seconds", type=float, default=1.5, help="per timed figure")
    parser.add_argument("--dir", default=None, help="checkpoint directory (default: a temp dir)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(relativeCreated)6.0f ms  %(message)s"
    )

    started = time.perf_counter()
    directory = Path(tempfile.mkdtemp(prefix="relayrl-replay-bench-", dir=args.dir))
    # A small object store: it holds in-flight batches only, and is reused warm.
    init_local_ray(object_store_memory=1 << 30)
    results: dict = {}
    try:
        for num_shards in (1, 2):
            run_shards(num_shards, args, results, directory)
    finally:
        ray.shutdown()
        shutil.rmtree(directory, ignore_errors=True)
    for key in ("checkpoint_write_mb_s", "checkpoint_read_mb_s"):
        ratio = results[key] / results["disk_write_mb_s"]
        results[key.replace("_mb_s", "_vs_disk_write")] = round(ratio, 2)
    results["config"] = {
        "batch": BATCH,
        "prefetch": args.prefetch,
        "small_capacity": args.small_capacity,
        "atari_capacity": args.atari_capacity,
        "small_write": args.small_write,
        "atari_write": args.atari_write,
        "cpus": os.cpu_count(),
    }
    results["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
