"""`ray job submit` against a real head node on loopback, and the deploy/ manifests.

Jobs are submitted with the ``ray job submit`` command, as the docs tell users to; the test
follows, stops and reads them through Ray's job SDK in this process (the same HTTP API the
``ray job`` commands call, without a Python start-up importing Ray for each call).
"""

import asyncio
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path

import pytest
import yaml
from ray.job_submission import JobSubmissionClient

from services.checkpoints.store import latest_valid, verify
from services.config import load_config
from tests.conftest import ROOT, processes_naming

PORT_FLAGS = (
    "--port",
    "--dashboard-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
    "--ray-client-server-port",
    "--node-manager-port",
    "--object-manager-port",
)


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class Head:
    """A `ray start --head` node on loopback with OS-chosen ports and its own temp dir."""

    def __init__(self):
        self.temp_dir = tempfile.mkdtemp(prefix="rrl-")
        ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS)), strict=True))
        self.dashboard = f"http://127.0.0.1:{ports['--dashboard-port']}"
        # The job stop window covers the final checkpoint (the deploy recipes set it too). The
        # head's own token (not the user's ~/.ray/auth_token) reaches the `ray` commands.
        self.token = secrets.token_hex(32)
        self.env = dict(
            os.environ,
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=self.token,
            RAY_JOB_STOP_WAIT_TIME_S="60",
        )
        for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH"):
            self.env.pop(name, None)
        args = [f"{flag}={port}" for flag, port in ports.items()]
        subprocess.run(
            [
                "ray",
                "start",
                "--head",
                "--node-ip-address=127.0.0.1",
                "--num-cpus=8",
                "--dashboard-host=127.0.0.1",
                "--include-dashboard=true",
                "--disable-usage-stats",
                f"--temp-dir={self.temp_dir}",
                *args,
            ],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=120,
        )

    def job(self, command, *args, timeout=120, check=True):
        return subprocess.run(
            ["ray", "job", command, "--address", self.dashboard, *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    @cached_property
    def client(self) -> JobSubmissionClient:
        """Ray's job SDK on this head's dashboard, with the head's token."""
        headers = {"authorization": f"Bearer {self.token}"}
        return JobSubmissionClient(self.dashboard, headers=headers)

    def submit(self, *train_args) -> str:
        """Submits the training job; retries while the job agent is still starting."""
        deadline = time.monotonic() + 90
        while True:
            result = self.job(
                "submit",
                "--no-wait",
                "--working-dir",
                ".",
                "--runtime-env",
                "deploy/runtime_env.local.yaml",
                "--",
                "python",
                "-m",
                "services.train",
                *train_args,
                check=False,
            )
            match = re.search(r"raysubmit_\w+", result.stdout + result.stderr)
            if result.returncode == 0 and match:
                return match.group(0)
            if "No available agent" not in result.stderr or time.monotonic() > deadline:
                raise AssertionError(result.stderr[-2000:])
            time.sleep(1)  # the head's job agent is still starting: nothing to await on

    def follow(self, job_id: str, until=None, timeout: float = 300) -> str | None:
        """Follows the job's log stream (it closes when the job ends).

        Returns the first line for which ``until`` is true, or None once the job has ended.
        """

        async def read() -> str | None:
            pending = ""
            async for chunk in self.client.tail_job_logs(job_id):
                pending += chunk
                *lines, pending = pending.split("\n")
                for line in lines:
                    if until is not None and until(line):
                        return line
            if until is not None:
                raise AssertionError(f"{job_id} ended first: {self.logs(job_id)[-2000:]}")
            return None

        return asyncio.run(asyncio.wait_for(read(), timeout))

    def wait(self, job_id: str, timeout=300) -> str:
        """Follows the job's logs to the end, then returns its final status."""
        self.follow(job_id, timeout=timeout)
        return self.client.get_job_status(job_id).value

    def logs(self, job_id: str) -> str:
        return self.client.get_job_logs(job_id)

    def stop(self):
        """Ends this head's processes only (`ray stop` would end every Ray on the machine).

        The process tree is taken before any signal: once the raylet is gone, the agents it
        started belong to init and name nothing of this head.
        """
        pids = processes_naming(self.temp_dir)
        for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 20)):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while _alive(pids) and time.monotonic() < deadline:
                time.sleep(0.2)  # polling process exit: there is no event to await
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _alive(pids: list[int]) -> bool:
    """Whether any of ``pids`` still runs (zombies count as gone)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z":
                return True
    return False


@pytest.fixture(scope="module")
def head():
    node = Head()
    yield node
    node.stop()


@pytest.mark.slow
def test_a_stopped_job_resumes_at_two_ranks_beside_a_fresh_job_each_apart(head, storage_root):
    # No run.dir: the job writes under the storage root (RELAYRL_STORAGE, the test's), never
    # inside its working directory, and a second job resumes from the printed run directory.
    # The stopped job and its resume run one collector and one shard: each actor is a torch
    # import on 2 shared cores, and what is checked here is the job's stop, storage and resume
    # (at two learner ranks), not the fleet's layout (the fresh job below runs the default one).
    small = ["--set", "collector.num_collectors=1", "--set", "replay.num_shards=1"]
    job_id = head.submit(
        "--set",
        "controller.total_frames=10000000",
        "--set",
        "controller.log_interval_s=0.5",
        *small,
    )
    # The first progress line with episodes: the job is training.
    head.follow(job_id, until=lambda line: line.startswith("frames ") and "return -" not in line)
    assert head.client.stop_job(job_id)
    assert head.wait(job_id) == "STOPPED"
    logs = head.logs(job_id)
    summary = json.loads([line for line in logs.splitlines() if line.startswith("{")][-1])
    assert summary["stopped_early"] is True and summary["checkpoint"]
    run_dir = Path(summary["run_dir"])
    assert run_dir.is_absolute() and run_dir.parent == storage_root
    assert run_dir.name == summary["run_id"] and f"directory {run_dir}" in logs
    checkpoint, manifest = latest_valid(run_dir / "checkpoints")
    assert str(checkpoint) == summary["checkpoint"]
    assert manifest["counters"]["collected_frames"] == summary["frames"]

    # Two jobs at once: the resume of the stopped one (at two learner ranks: #28, progress every
    # second) and the default config as a new user submits it (one run name, one working
    # directory). Each succeeds and keeps to its own run directory and rotation.
    budget = [
        "--set",
        "controller.total_frames=3000",
        "--set",
        "checkpoint.interval_frames=1000",
        "--set",
        "checkpoint.keep=2",
    ]
    resume = [
        "--resume",
        summary["run_dir"],
        "--set",
        f"controller.total_frames={summary['frames'] + 2000}",
        *small,
    ]
    more = ["--set", "learner.world_size=2", "--set", "controller.log_interval_s=1"]
    with ThreadPoolExecutor(2) as submitting:
        job_ids = list(submitting.map(lambda args: head.submit(*args), [[*resume, *more], budget]))
    statuses = [head.wait(job) for job in job_ids]
    logs = [head.logs(job) for job in job_ids]
    assert statuses == ["SUCCEEDED"] * 2, [log[-2000:] for log in logs]
    assert re.search(r"^frames [\d,]+/[\d,]+ \|", logs[0], re.M), logs[0][-2000:]
    final, fresh = (
        json.loads([line for line in log.splitlines() if line.startswith("{")][-1]) for log in logs
    )
    assert final["frames"] >= summary["frames"] + 2000
    assert final["optim_steps"] > summary["optim_steps"] and final["generation"] == 1
    assert Path(final["run_dir"]).parent == storage_root and final["run_id"] != summary["run_id"]
    assert latest_valid(Path(final["run_dir"]) / "checkpoints")[0] == Path(final["checkpoint"])
    assert len({summary["run_id"], final["run_id"], fresh["run_id"]}) == 3
    assert final["run_dir"] != fresh["run_dir"]
    for done, job_id in ((final, job_ids[0]), (fresh, job_ids[1])):
        run_dir = Path(done["run_dir"])
        assert run_dir.name == done["run_id"]
        assert done["run_id"].endswith(job_id[-6:].lower())  # token from the submission id
        newest, manifest = latest_valid(run_dir / "checkpoints")
        assert str(newest) == done["checkpoint"]
        assert manifest["counters"]["collected_frames"] == done["frames"]
        records = (run_dir / "metrics.jsonl").read_text().splitlines()
        assert records and json.loads(records[-1])["frames"] == done["frames"]
    assert fresh["frames"] >= 3000 and fresh["optim_steps"] > 0
    rotation = sorted((Path(fresh["run_dir"]) / "checkpoints").glob("ckpt-*"))
    assert len(rotation) == 2  # its own rotation of keep=2, untouched by the others
    for checkpoint in rotation:
        verify(checkpoint)


@pytest.mark.slow
def test_a_job_refuses_run_data_inside_its_working_directory(head):
    job_id = head.submit("--set", "run.storage=results")  # relative: the job's working dir
    assert head.wait(job_id) == "FAILED"
    info = head.client.get_job_info(job_id)
    assert "exit code 2" in info.message  # refused as an invalid config
    logs = head.logs(job_id)
    assert "invalid config: run.storage:" in logs and "working directory" in logs, logs[-2000:]


def test_manifests_parse_and_name_what_exists():
    deploy = ROOT / "deploy"
    for path in [*deploy.rglob("*.yaml"), *deploy.rglob("*.yml")]:
        docs = list(yaml.safe_load_all(path.read_text()))
        assert docs and all(isinstance(d, dict) for d in docs), path
    for path in (deploy / "configs").glob("*.yaml"):
        load_config(path)  # every shipped run config validates
    rayjob = yaml.safe_load((deploy / "kuberay" / "rayjob.yaml").read_text())
    spec = rayjob["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    entry = spec["entrypoint"].split()
    assert entry[:3] == ["python", "-m", "services.train"]
    assert (ROOT / entry[entry.index("--config") + 1]).exists()
    assert yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"]
    groups = {g["groupName"] for g in spec["rayClusterSpec"]["workerGroupSpecs"]}
    assert groups == {"collectors", "learners"}
    # Ray token auth on every pod and the submitter (Ray 2.60 starts without it otherwise).
    cluster_spec = spec["rayClusterSpec"]
    pods = [cluster_spec["headGroupSpec"], *cluster_spec["workerGroupSpecs"]]
    pods.append({"template": spec["submitterPodTemplate"]})
    for pod in pods:
        env = {e["name"]: e for e in pod["template"]["spec"]["containers"][0]["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "relayrl-ray-token"
    cluster = yaml.safe_load((deploy / "cluster.yaml").read_text())
    assert cluster["head_node_type"] in cluster["available_node_types"]
    starts = [*cluster["head_start_ray_commands"], *cluster["worker_start_ray_commands"]]
    assert all("RAY_AUTH_MODE=token" in c for c in starts if "ray start" in c)
    assert "--dashboard-host=127.0.0.1" in " ".join(cluster["head_start_ray_commands"])
    assert "~/.ray/auth_token" in cluster["file_mounts"]
    monitors = list(yaml.safe_load_all((deploy / "kuberay" / "podmonitors.yaml").read_text()))
    assert {m["kind"] for m in monitors} == {"PodMonitor"}
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    cited = {
        p
        for doc in docs
        for p in re.findall(r"deploy/[\w./-]+\.(?:yaml|yml|json)", doc.read_text())
    }
    assert "deploy/kuberay/rayjob.yaml" in cited
    for path in cited:
        assert (ROOT / path).exists(), path
    assert Path(ROOT / "services" / "train.py").exists()
