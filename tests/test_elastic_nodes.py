"""``collector.num_collectors: auto`` follows a real two-node cluster as it grows and shrinks.

A head node (3 CPUs) runs the learner (pinned), one replay shard and the collectors its CPUs
offer (3 - 1 - 0.5 = 1.5: one collector of 1 CPU). A worker node (2 CPUs) joins with ``ray
start --address`` mid-run: the fleet grows to 3. The worker's raylet is then killed: its two
collectors are dropped, not re-created on the full head, and the run goes on with one until a
SIGTERM stops it with a final checkpoint. Frames stay exact throughout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from services.checkpoints.store import latest_valid
from tests.conftest import PYTHON, ROOT
from tests.test_node_loss import TwoNodes

pytestmark = pytest.mark.slow  # a cluster and a run of its own


class GrowingCluster(TwoNodes):
    """A head node now, a worker node when :meth:`add_worker` is called."""

    def __init__(self):
        TwoNodes.__init__(self, worker=False, cpus=3)

    def add_worker(self):
        common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", "--num-cpus=2"]
        self.ray("start", f"--address=127.0.0.1:{self.port}", '--resources={"worker": 1}', *common)


def records(run_dir):
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def wait_for(run_dir, process, what, predicate, timeout=180.0):
    """Reads metrics.jsonl (written live) until a record satisfies ``predicate``."""
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in records(run_dir) if predicate(r)]
        if found:
            return found[-1]
        assert process.poll() is None, f"the run ended while waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.25)


def test_auto_collectors_grow_with_a_joining_node_and_drop_a_lost_nodes(tmp_path):
    cluster = GrowingCluster()
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [PYTHON, "-m", "services.train"]
        + [
            arg
            for setting in (
                "collector.num_collectors=auto",
                "collector.num_cpus=1",
                "collector.max_collectors=4",
                "replay.num_shards=1",
                "replay.num_cpus=0.5",
                "learner.resources_per_rank={CPU: 1, head: 1}",
                "controller.total_frames=100000000",
                "controller.log_interval_s=0.5",
                f"run.dir={run_dir}",
                "metrics.enabled=false",
            )
            for arg in ("--set", setting)
        ],
        cwd=ROOT,
        env={**cluster.env, "RAY_ADDRESS": f"127.0.0.1:{cluster.port}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = wait_for(
            run_dir, process, "collection on the head", lambda r: r.get("frames", 0) > 0
        )
        assert started["sizes"]["current"]["collectors"] == 1
        cluster.add_worker()
        grown = wait_for(
            run_dir,
            process,
            "the fleet growing",
            lambda r: r.get("event") == "resize" and r["to"] == 3,
        )
        assert grown["from"] == 1 and "CPUs" in grown["cause"]
        on_three = wait_for(
            run_dir,
            process,
            "frames at 3 collectors",
            lambda r: (
                r.get("sizes", {}).get("current", {}).get("collectors") == 3
                and r["frames"] > grown["frames"]
            ),
        )
        os.kill(cluster.worker_raylet(), signal.SIGKILL)  # the worker node is gone
        dropped = wait_for(
            run_dir,
            process,
            "the lost node's collectors dropped",
            lambda r: r.get("event") == "resize" and r["cause"] == "node lost: dropped",
        )
        assert (dropped["from"], dropped["to"]) == (3, 1)
        wait_for(
            run_dir,
            process,
            "frames at 1 collector after the loss",
            lambda r: (
                r.get("sizes", {}).get("current", {}).get("collectors") == 1
                and r.get("collectors_dropped") == 2
                and r["frames"] > max(dropped["frames"], on_three["frames"])
            ),
        )
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=180)
    finally:
        process.kill()
        cluster.stop()
    assert process.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["frames"] == summary["transitions"] > on_three["frames"]
    _, manifest = latest_valid(run_dir / "checkpoints")
    assert manifest["counters"]["collected_frames"] == summary["frames"]
