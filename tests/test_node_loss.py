"""Node loss on a real two-node Ray cluster on this machine (#15).

A head and a worker node are started with ``ray start`` in a temp dir of their own (so no other
Ray on the machine is touched); the run's learner is pinned to the head with a custom resource,
its collectors and replay shards spread over both nodes (the services' placement group is
``SPREAD``). Killing the worker's raylet mid-run loses the actors on it: Ray re-places the
placement group's bundles on the head and restarts them there, and the run completes with exact
frame accounting.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from services.checkpoints.store import latest_valid
from tests.conftest import PYTHON, ROOT, cli_env, processes_naming

pytestmark = pytest.mark.slow  # every test here starts a run of its own


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TwoNodes:
    """A head and a worker node on loopback, in their own temp dir; fast node-death detection."""

    def __init__(self, worker: bool = True, cpus: int = 4):
        self.temp_dir = tempfile.mkdtemp(dir="/tmp", prefix="rn")  # short socket paths
        self.port = free_port()
        self.env = {**cli_env(), "RAY_TMPDIR": self.temp_dir, "RAY_AUTH_MODE": "token"}
        self.env.pop("RAY_ADDRESS", None)
        common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", f"--num-cpus={cpus}"]
        head_env = {
            **self.env,
            "RAY_health_check_period_ms": "500",
            "RAY_health_check_failure_threshold": "3",
        }
        self.ray("start", "--head", f"--port={self.port}", "--include-dashboard=false",
                 '--resources={"head": 100}', *common, env=head_env)  # fmt: skip
        if worker:
            self.ray(
                "start", f"--address=127.0.0.1:{self.port}", '--resources={"worker": 1}', *common
            )

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

    def worker_raylet(self) -> int:
        (pid,) = self.pids(b"raylet/raylet", b"static_resource_list=worker")
        return pid

    def stop(self):
        """Ends this cluster's processes only (`ray stop` would end every Ray on the machine)."""
        pids = processes_naming(self.temp_dir)  # before any signal orphans the agents
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)


def frames_in(progress_line: str) -> int:
    """Frames counted so far, from a progress line ``frames 5,120/40,000 | ...``."""
    return int(progress_line.split()[1].split("/")[0].replace(",", ""))


@pytest.fixture
def two_nodes():
    cluster = TwoNodes()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_losing_a_worker_node_mid_run_re_places_its_actors_and_frames_stay_exact(
    two_nodes, tmp_path
):
    process = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "services.train",
            "--set",
            "controller.total_frames=40000",
            "--set",
            "controller.log_interval_s=0.5",
            "--set",
            "learner.resources_per_rank={CPU: 1, head: 1}",
            "--set",
            "checkpoint.interval_frames=4000",
            "--set",
            "replay.health_interval_s=0.2",
            "--set",
            f"run.dir={tmp_path}",
            "--set",
            "metrics.enabled=false",
        ],
        cwd=ROOT,
        env={**two_nodes.env, "RAY_ADDRESS": f"127.0.0.1:{two_nodes.port}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in process.stdout:
            if line.startswith("frames ") and frames_in(line) > 5000:
                os.kill(two_nodes.worker_raylet(), signal.SIGKILL)  # the node is gone
                break
        out, err = process.communicate(timeout=300)
    finally:
        process.kill()
    assert process.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    # Something of the run lived on the lost node and was restarted elsewhere.
    assert summary["collector_failures"] + summary["replay_restarts"] >= 1, err[-3000:]
    assert summary["frames"] == summary["transitions"] >= 40000
    assert summary["stopped_early"] is False
    _, manifest = latest_valid(tmp_path / "checkpoints")
    assert manifest["counters"]["collected_frames"] == summary["frames"], err[-3000:]
