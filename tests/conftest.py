"""Shared fixtures: one local Ray cluster per test session, on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from replay.local_ray import init_local_ray

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def storage_root(tmp_path_factory):
    """Runs started by tests keep their data in a temporary storage root, not the home dir.

    Set in this process's environment, it reaches CLI subprocesses and the jobs of test head
    nodes (``services.run.storage``: ``RELAYRL_STORAGE``).
    """
    root = tmp_path_factory.mktemp("relayrl_results")
    previous = os.environ.get("RELAYRL_STORAGE")
    os.environ["RELAYRL_STORAGE"] = str(root)
    yield root
    if previous is None:
        os.environ.pop("RELAYRL_STORAGE", None)
    else:
        os.environ["RELAYRL_STORAGE"] = previous


def pytest_collection_modifyitems(items):
    """Every test on the shared Ray cluster is ``slow``: ``-m "not slow"`` is the unit tests.

    Tests that start a CLI run or a cluster of their own carry ``@pytest.mark.slow`` themselves.
    """
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray with generous logical CPUs (actors mostly wait on 2 real cores)."""
    if not ray.is_initialized():
        init_local_ray(log_to_driver=True)
    yield ray
    ray.shutdown()


def processes_naming(text: str) -> list[int]:
    """Processes whose command line holds ``text``, and all their descendants.

    Ray's agents rename themselves (``ray::DashboardAgent``), so a cluster's processes are its
    named ones and their children.
    """
    named, parents = set(), {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    named.add(int(entry.name))
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, grew = set(named), True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        found |= children
        grew = bool(children)
    return sorted(found)


@pytest.fixture
def free_port() -> int:
    """A port the OS reports free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cli_env() -> dict[str, str]:
    """Environment for running the CLI as a subprocess from the repo root."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


PYTHON = sys.executable


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Runs ``python -m services.train ARGS`` from the repo root and captures its output."""
    return subprocess.run(
        [PYTHON, "-m", "services.train", *args],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
