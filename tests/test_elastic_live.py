"""Live resizes of a running DQN job over ``Control/Scale`` (real Ray, real gRPC, real scrapes).

One run starts with 1 collector, 1 shard and 1 rank; it grows to 3 collectors, then to 2
shards and 2 ranks, shrinks back to 1/1/1, refuses a size that breaks its config, and stops.
Frames stay exact (at the final cut every stored transition was counted once), each resize is a
``metrics.jsonl`` record, and the size gauges follow.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import grpc
import pytest

from services.bench.wire.hostile import transitions
from services.config import load_config
from services.grpc.client import RelayClient
from services.observe.runlog import read_events
from services.run.launch import prepare_run
from services.scale import main as scale_main

TOKEN = "elastic-test-token"


def gauge(url: str, name: str, size: str) -> float | None:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    match = re.search(rf'relayrl_{name}\{{run="[^"]+",size="{size}"\}} (\S+)', text)
    return float(match.group(1)) if match else None


def wait_gauge(url: str, name: str, size: str, value: float, timeout: float = 60.0) -> None:
    """Scrapes until the gauge shows ``value`` (progress snapshots refresh it)."""
    deadline = time.monotonic() + timeout
    while (seen := gauge(url, name, size)) != value:
        assert time.monotonic() < deadline, f"relayrl_{name}{{size={size}}} is {seen}, not {value}"
        time.sleep(0.2)


def test_sizes_change_live_with_exact_frames(ray_cluster, tmp_path, free_port):
    config = load_config(
        overrides=[
            "run.name=el-live",
            f"run.dir={tmp_path / 'run'}",
            "collector.num_collectors=1",
            "collector.envs_per_collector=2",
            "collector.rollout_frames=64",
            "replay.num_shards=1",
            "replay.capacity=400000",
            "controller.total_frames=10000000",
            "controller.init_random_frames=300",
            "controller.utd_ratio=0.25",
            "controller.log_interval_s=0.25",
            "learner.global_batch_size=32",
            f"grpc.port={free_port}",
            f"grpc.token={TOKEN}",
        ]
    )
    run = prepare_run(config)
    cuts = []
    run.controller.register(
        "checkpoint",
        lambda c, path, seconds: cuts.append(
            (sum(s["size"] for s in c.replay.stats()), c.counters.transitions, len(c.shards))
        ),
    )
    summary = []
    thread = threading.Thread(target=lambda: summary.append(run.execute()), daemon=True)
    thread.start()
    address = f"127.0.0.1:{free_port}"
    with RelayClient(address, token=TOKEN, timeout=300) as client:
        client.wait_health("SERVING", timeout=300)
        grown = client.scale(num_collectors=3, wait=True)
        assert (grown.num_collectors, grown.num_shards, grown.world_size) == (3, 1, 1)
        wait_gauge(run.exporter.url, "collectors", "current", 3.0)
        wider = client.scale(num_shards=2, world_size=2, wait=True)
        assert (wider.num_collectors, wider.num_shards, wider.world_size) == (3, 2, 2)
        wait_gauge(run.exporter.url, "learner_world_size", "current", 2.0)
        wait_gauge(run.exporter.url, "replay_shards", "target", 2.0)
        # An external actor's inserts (the driver's path; a writer's batches take turns over
        # the shards in runs of 8) reach the added shard.
        reply = client.insert([transitions(32, seed) for seed in range(16)])
        assert reply.frames_counted == 16 * 32
        assert {r.shard_id for r in reply.receipts} == {0, 1}
        with pytest.raises(grpc.RpcError) as refused:  # 32 is not divisible by 3 ranks
            client.scale(world_size=3)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "learner.global_batch_size" in refused.value.details()
        # The command line does the shrink, as an operator would.
        shrink = ["--collectors", "1", "--shards", "1", "--world-size", "1"]
        code = scale_main(["--address", address, "--token", TOKEN, *shrink])
        assert code == 0
        shrunk = client.status()
        assert len(shrunk.replay) == 1
        reply = client.insert([transitions(32, seed) for seed in range(16, 26)])  # 1 is gone
        assert reply.frames_counted == 10 * 32 and {r.shard_id for r in reply.receipts} == {0}
        deadline = time.monotonic() + 60  # collection goes on at 1/1/1
        while client.status().frames <= shrunk.frames:
            assert time.monotonic() < deadline, "no frames collected after the shrink"
            time.sleep(0.2)
        assert scale_main(["--address", address, "--token", "wrong", "--collectors", "2"]) == 1
        client.stop(wait=True)
    thread.join(timeout=300)
    [result] = summary
    assert result["generation"] == 2  # two world-size changes, two new learner generations
    stored, counted, shards = cuts[-1]  # the final cut: nothing in flight
    assert shards == 1 and stored == counted == result["transitions"] > 0
    events = [(e["what"], e["from"], e["to"]) for e in read_events(run.run_dir, "resize")]
    assert events == [
        ("collectors", 1, 3),
        ("shards", 1, 2),
        ("world_size", 1, 2),
        ("shards", 2, 1),
        ("world_size", 2, 1),
        ("collectors", 3, 1),
    ]
    assert all(e["cause"] == "Control/Scale" for e in read_events(run.run_dir, "resize"))
