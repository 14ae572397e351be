"""Every entry point starts its own local Ray, whatever cluster files lie around (#15).

A stale ``ray_current_cluster`` (left by a ``ray start`` whose head is gone) makes a bare
``ray.init(num_cpus=...)`` try to join it and fail; entry points must ask for a local cluster
explicitly (``address="local"``), or join ``RAY_ADDRESS`` when the user sets it. The benches
ask through ``replay.local_ray.init_local_ray``, whose own ``ray.init`` is checked here too.
"""

import ast
import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from replay.local_ray import init_local_ray, local_ray_options
from tests.conftest import PYTHON, ROOT, cli_env

PACKAGES = ("services", "learner", "collector", "replay")


def is_ray_init(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "init"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "ray"
    )


def is_local_helper(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "init_local_ray"
    )


def ray_init_calls():
    """``(path, function, call)`` for every ``ray.init(...)`` or ``init_local_ray(...)``."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for function in ast.walk(tree):
                if not isinstance(function, ast.FunctionDef):
                    continue
                for node in ast.walk(function):
                    if is_ray_init(node) or is_local_helper(node):
                        yield path.relative_to(ROOT), function, node


def test_every_entry_point_asks_for_a_local_cluster_or_ray_address():
    calls = list(ray_init_calls())
    assert len(calls) >= 7  # train, the benches, the GPU check
    inits = {(path, function.name) for path, function, call in calls if is_ray_init(call)}
    assert (Path("replay/local_ray.py"), "init_local_ray") in inits
    for path, function, call in calls:
        if is_local_helper(call):
            continue  # its own ray.init is among the calls checked
        address = next((k.value for k in call.keywords if k.arg == "address"), None)
        if isinstance(address, ast.Constant) and address.value == "local":
            continue
        # The only other form joins the cluster the user named in RAY_ADDRESS.
        assert "RAY_ADDRESS" in ast.unparse(function), f"{path}:{call.lineno} {function.name}"


def test_the_local_ray_helper_binds_loopback_and_takes_overrides():
    options = local_ray_options()
    assert options["num_cpus"] == 8 and options["namespace"] == "relayrl"
    assert options["_node_ip_address"] == "127.0.0.1" and not options["include_dashboard"]
    assert options["runtime_env"] == {"env_vars": {"PYTHONPATH": str(ROOT)}}
    options = local_ray_options(None, log_to_driver=True, object_store_memory=1 << 30)
    assert options["num_cpus"] is None and options["log_to_driver"]
    assert options["object_store_memory"] == 1 << 30
    with pytest.raises(TypeError, match="address"):  # always a fresh local cluster
        init_local_ray(address="auto")


@pytest.fixture
def stale_cluster_file():
    """A Ray temp dir whose cluster file points at a head that is gone."""
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="rt") as temp:  # short socket paths
        os.mkdir(os.path.join(temp, "ray"))
        with open(os.path.join(temp, "ray", "ray_current_cluster"), "w") as f:
            f.write("127.0.0.1:1\n")
        yield {**cli_env(), "RAY_TMPDIR": temp}


@pytest.mark.slow
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
    # The smallest run (one collector, one shard): what is checked is that the entry point
    # starts its own Ray beside the stale file, not the run's layout.
    train = subprocess.run(
        [PYTHON, "-m", "services.train", "--set", "controller.total_frames=500",
         "--set", "metrics.enabled=false", "--set", "ray.dashboard=false",
         "--set", "collector.num_collectors=1", "--set", "replay.num_shards=1"],
        cwd=ROOT,
        env={**stale_cluster_file, "RELAYRL_STORAGE": storage},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-2000:]
    assert json.loads(train.stdout.strip().splitlines()[-1])["frames"] >= 500
