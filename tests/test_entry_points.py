"""Every entry point starts its own local Ray, whatever cluster files lie around (#15).

A stale ``ray_current_cluster`` (left by a ``ray start`` whose head is gone) makes a bare
``ray.init(num_cpus=...)`` try to join it and fail; entry points must ask for a local cluster
explicitly (``address="local"``), or join ``RAY_ADDRESS`` when the user sets it.
"""

import ast
import json
import os
import subprocess
import tempfile

import pytest

from tests.conftest import PYTHON, ROOT, cli_env

PACKAGES = ("services", "learner", "collector", "replay")


def ray_init_calls():
    """``(path, function, call)`` for every ``ray.init(...)`` in the shipped packages."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for function in ast.walk(tree):
                if not isinstance(function, ast.FunctionDef):
                    continue
                for node in ast.walk(function):
                    if (
                        isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "init"
                        and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "ray"
                    ):
                        yield path.relative_to(ROOT), function, node


def test_every_entry_point_asks_for_a_local_cluster_or_ray_address():
    calls = list(ray_init_calls())
    assert len(calls) >= 7  # train, the benches, the GPU check
    for path, function, call in calls:
        address = next((k.value for k in call.keywords if k.arg == "address"), None)
        if isinstance(address, ast.Constant) and address.value == "local":
            continue
        # The only other form joins the cluster the user named in RAY_ADDRESS.
        assert "RAY_ADDRESS" in ast.unparse(function), f"{path}:{call.lineno} {function.name}"


@pytest.fixture
def stale_cluster_file():
    """A Ray temp dir whose cluster file points at a head that is gone."""
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="rt") as temp:  # short socket paths
        os.mkdir(os.path.join(temp, "ray"))
        with open(os.path.join(temp, "ray", "ray_current_cluster"), "w") as f:
            f.write("127.0.0.1:1\n")
        yield {**cli_env(), "RAY_TMPDIR": temp}


def test_a_bare_init_fails_on_the_stale_file_but_the_entry_points_run(stale_cluster_file):
    bare = subprocess.run(
        [PYTHON, "-c", "import ray; ray.init(num_cpus=1)"],
        env=stale_cluster_file,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bare.returncode != 0  # the stale file is really there and really read
    assert "When connecting to an existing cluster, num_cpus" in bare.stderr
    storage = os.path.join(stale_cluster_file["RAY_TMPDIR"], "runs")
    train = subprocess.run(
        [PYTHON, "-m", "services.train", "--set", "controller.total_frames=500",
         "--set", "metrics.enabled=false", "--set", "ray.dashboard=false"],
        cwd=ROOT,
        env={**stale_cluster_file, "RELAYRL_STORAGE": storage},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-2000:]
    assert json.loads(train.stdout.strip().splitlines()[-1])["frames"] >= 500
