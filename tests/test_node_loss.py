"""Nodes lost and joining on a real two-node Ray cluster on this machine (#15, #28).

A head and a worker node are started with ``ray start`` in a temp dir of their own (so no other
Ray on the machine is touched), once for the module; each run's learner is pinned to the head
with a custom resource.

- Node loss (#15): the collectors and replay shards spread over both nodes (the services'
  placement group is ``SPREAD``). Killing the worker's raylet mid-run loses the actors on it:
  Ray re-places the placement group's bundles on the head and restarts them there, and the run
  completes with exact frame accounting.
- An auto fleet (#28, ``collector.num_collectors: auto``): on the head alone (4 CPUs less the
  learner's 1 and the shard's 0.5) it runs 2 collectors of 1 CPU; a second worker node (2 CPUs)
  joins with ``ray start --address`` mid-run and the fleet grows to 4; that node's raylet is
  killed and its two collectors are dropped, not re-created on the full head; the run goes on
  with 2 until a SIGTERM stops it with a final checkpoint, frames exact throughout.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from services.checkpoints.store import latest_valid
from tests.cli_run import CliRun
from tests.conftest import cli_env, processes_naming

pytestmark = pytest.mark.e2e  # every test here starts a run of its own


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TwoNodes:
    """A head and a worker node on loopback, in their own temp dir; fast node-death detection."""

    def __init__(self):
        self.temp_dir = tempfile.mkdtemp(dir="/tmp", prefix="rn")  # short socket paths
        self.port = free_port()
        self.env = {**cli_env(), "RAY_TMPDIR": self.temp_dir, "RAY_AUTH_MODE": "token"}
        self.env.pop("RAY_ADDRESS", None)
        common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", "--num-cpus=4"]
        head_env = {
            **self.env,
            "RAY_health_check_period_ms": "500",
            "RAY_health_check_failure_threshold": "3",
        }
        self.ray("start", "--head", f"--port={self.port}", "--include-dashboard=false",
                 '--resources={"head": 100}', *common, env=head_env)  # fmt: skip
        self.ray("start", f"--address=127.0.0.1:{self.port}", '--resources={"worker": 1}', *common)

    def run_env(self) -> dict[str, str]:
        """The environment of a run joining this cluster."""
        return {**self.env, "RAY_ADDRESS": f"127.0.0.1:{self.port}"}

    def ray(self, *args, env=None):
        subprocess.run(
            ["ray", *args], env=env or self.env, check=True, capture_output=True, timeout=120
        )

    def pids(self, *needles: bytes) -> list[int]:
        """Processes of this cluster whose command line holds every needle."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    cmdline = (entry / "cmdline").read_bytes()
                    if self.temp_dir.encode() in cmdline and all(n in cmdline for n in needles):
                        found.append(int(entry.name))
        return found

    def worker_raylet(self, name: str = "worker") -> int:
        (pid,) = self.pids(b"raylet/raylet", f"static_resource_list={name}".encode())
        return pid

    def add_worker(self, name: str, cpus: int) -> None:
        """Another worker node joins (``ray start --address``) with the resource ``name``."""
        common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", f"--num-cpus={cpus}"]
        self.ray(
            "start", f"--address=127.0.0.1:{self.port}", f'--resources={{"{name}": 1}}', *common
        )

    def stop(self):
        """Ends this cluster's processes only (`ray stop` would end every Ray on the machine)."""
        pids = processes_naming(self.temp_dir)  # before any signal orphans the agents
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)


def sets(settings) -> list[str]:
    """``--set`` arguments for each setting."""
    return [arg for setting in settings for arg in ("--set", setting)]


@pytest.fixture(scope="module")
def two_nodes():
    cluster = TwoNodes()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_losing_a_worker_node_mid_run_re_places_its_actors_and_frames_stay_exact(
    two_nodes, tmp_path
):
    settings = (
        "controller.total_frames=20000",
        "controller.log_interval_s=0.5",
        "learner.resources_per_rank={CPU: 1, head: 1}",
        "checkpoint.interval_frames=4000",
        "replay.health_interval_s=0.2",
        "metrics.enabled=false",
    )
    with CliRun(*sets(settings), run_dir=tmp_path, env=two_nodes.run_env()) as run:
        run.until_frames(5000)
        os.kill(two_nodes.worker_raylet(), signal.SIGKILL)  # the node is gone
        summary = run.summary(timeout=300)
        err = run.tail()
    # Something of the run lived on the lost node and was restarted elsewhere.
    assert summary["collector_failures"] + summary["replay_restarts"] >= 1, err[-3000:]
    assert summary["frames"] == summary["transitions"] >= 20000
    assert summary["stopped_early"] is False
    _, manifest = latest_valid(tmp_path / "checkpoints")
    assert manifest["counters"]["collected_frames"] == summary["frames"], err[-3000:]


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


def test_auto_collectors_grow_with_a_joining_node_and_drop_a_lost_nodes(two_nodes, tmp_path):
    cluster = two_nodes
    for pid in cluster.pids(b"raylet/raylet", b"static_resource_list=worker"):
        os.kill(pid, signal.SIGKILL)  # the head alone (the node-loss test has killed it already)
    run_dir = tmp_path / "run"
    settings = (
        "collector.num_collectors=auto",
        "collector.num_cpus=1",
        "collector.max_collectors=4",
        "replay.num_shards=1",
        "replay.num_cpus=0.5",
        "learner.resources_per_rank={CPU: 1, head: 1}",
        "controller.total_frames=100000000",
        "controller.log_interval_s=0.5",
        "metrics.enabled=false",
    )
    run = CliRun(*sets(settings), run_dir=run_dir, env=cluster.run_env())
    process = run.process
    try:
        started = wait_for(
            run_dir, process, "collection on the head", lambda r: r.get("frames", 0) > 0
        )
        assert started["sizes"]["current"]["collectors"] == 2
        cluster.add_worker("joiner", cpus=2)
        grown = wait_for(
            run_dir,
            process,
            "the fleet growing",
            lambda r: r.get("event") == "resize" and r["to"] == 4,
        )
        assert grown["from"] == 2 and "CPUs" in grown["cause"]
        on_four = wait_for(
            run_dir,
            process,
            "frames at 4 collectors",
            lambda r: (
                r.get("sizes", {}).get("current", {}).get("collectors") == 4
                and r["frames"] > grown["frames"]
            ),
        )
        os.kill(cluster.worker_raylet("joiner"), signal.SIGKILL)  # the joined node is gone
        dropped = wait_for(
            run_dir,
            process,
            "the lost node's collectors dropped",
            lambda r: r.get("event") == "resize" and r["cause"] == "node lost: dropped",
        )
        assert (dropped["from"], dropped["to"]) == (4, 2)
        wait_for(
            run_dir,
            process,
            "frames at 2 collectors after the loss",
            lambda r: (
                r.get("sizes", {}).get("current", {}).get("collectors") == 2
                and r.get("collectors_dropped") == 2
                and r["frames"] > max(dropped["frames"], on_four["frames"])
            ),
        )
        run.send_signal(signal.SIGTERM)
        summary = run.summary(timeout=180)
    finally:
        run.close()
    assert summary["frames"] == summary["transitions"] > on_four["frames"]
    _, manifest = latest_valid(run_dir / "checkpoints")
    assert manifest["counters"]["collected_frames"] == summary["frames"]
