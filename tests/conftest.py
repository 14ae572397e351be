"""Shared fixtures: one local Ray cluster per test session, on loopback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
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


# -- what a test costs ----------------------------------------------------------------------------
# Each test has exactly one cost class (a marker): ``unit`` (no Ray: pure cores, text checks, a
# CLI refusing a config before Ray starts), ``ray`` (on the shared session Ray, the
# ``ray_cluster`` fixture) or ``e2e`` (CLI runs as subprocesses, clusters of their own). The class
# is inferred: a test using ``ray_cluster`` is ``ray``; one marked ``e2e`` (itself or by its
# module's ``pytestmark``), or ``slow`` without ``ray_cluster``, is ``e2e``; any other is ``unit``.
# ``ray`` and ``e2e`` tests are also ``slow``, so ``-m "not slow"`` (or ``-m unit``) is the unit
# tests. A ``unit`` test that starts Ray, in process or in a subprocess, fails (``CostGuard``).
COST_CLASSES = ("unit", "ray", "e2e")


def cost_class(item: pytest.Item) -> str:
    """The one cost class of a collected test (see above); raises ``ValueError`` on a conflict."""
    declared = {m.name for m in item.iter_markers() if m.name in COST_CLASSES}
    uses_ray = "ray_cluster" in getattr(item, "fixturenames", ())
    marked_slow = item.get_closest_marker("slow") is not None
    if len(declared) > 1:
        raise ValueError(f"{item.nodeid}: marked {sorted(declared)}; one cost class only")
    if declared == {"unit"} and (uses_ray or marked_slow):
        raise ValueError(f"{item.nodeid}: marked unit but uses ray_cluster or is marked slow")
    if "e2e" in declared:
        return "e2e"
    if uses_ray or declared == {"ray"}:
        return "ray"
    return "e2e" if marked_slow else "unit"


def pytest_collection_modifyitems(items):
    """Gives each test its cost class; ``ray`` and ``e2e`` tests are ``slow`` too."""
    conflicts = []
    for item in items:
        try:
            kind = cost_class(item)
        except ValueError as err:
            conflicts.append(str(err))
            continue
        for name in (kind,) if kind == "unit" else (kind, "slow"):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
        item.stash[COST] = kind
    if conflicts:
        raise pytest.UsageError("\n".join(conflicts))


COST = pytest.StashKey[str]()
GUARD = pytest.StashKey["CostGuard"]()


class CostGuard:
    """Fails a ``unit`` test that starts Ray, in this process or in any subprocess.

    While the test (its fixtures included) runs, ``RAY_TMPDIR`` names a fresh directory of its
    own, which reaches every subprocess started with this process's environment
    (:func:`cli_env`): a Ray node started there leaves its session under it.
    """

    def __init__(self) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="rl-unit-", dir="/tmp")  # short socket paths
        self.previous = os.environ.get("RAY_TMPDIR")
        self.ray_before = ray.is_initialized()
        os.environ["RAY_TMPDIR"] = self.temp_dir

    def finish(self) -> str | None:
        """Restores ``RAY_TMPDIR``; returns what the test started, if anything."""
        if self.previous is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = self.previous
        started = (Path(self.temp_dir) / "ray").exists()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        if started:
            return "started a Ray node (itself or in a subprocess)"
        if ray.is_initialized() and not self.ray_before:
            return "initialized Ray in the test process"
        return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if item.stash.get(COST, "unit") == "unit":
        item.stash[GUARD] = CostGuard()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    guard = item.stash.get(GUARD, None)
    if guard is not None:
        del item.stash[GUARD]
        started = guard.finish()
        if started:
            pytest.fail(
                f"{item.nodeid} {started} but is a unit test: mark it e2e (or use the "
                "ray_cluster fixture), see the cost classes in tests/conftest.py",
                pytrace=False,
            )
    return result


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


@pytest.fixture
def joining_env(ray_cluster) -> dict[str, str]:
    """:func:`cli_env` for a CLI run that joins the session's Ray (``RAY_ADDRESS``).

    Such a run connects instead of starting an embedded Ray of its own, a few seconds of every
    start-up; tests of the embedded start itself (its process group, ports, dashboard, a fresh
    install) run without it.
    """
    from replay.local_ray import SINGLE_MACHINE_ENV

    env = cli_env()
    env["RAY_ADDRESS"] = ray_cluster.get_runtime_context().gcs_address
    env[SINGLE_MACHINE_ENV] = "0"  # reach the session's node on loopback, where it listens
    return env


PYTHON = sys.executable


def run_cli(
    *args: str, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Runs ``python -m services.train ARGS`` from the repo root and captures its output.

    ``env`` defaults to :func:`cli_env` (an embedded Ray); :func:`joining_env` joins the
    session's.
    """
    return subprocess.run(
        [PYTHON, "-m", "services.train", *args],
        cwd=ROOT,
        env=cli_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def one_torch_thread():
    """One torch thread, as collectors run (``torch.set_num_threads(1)``); restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
