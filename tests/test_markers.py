"""The cost classes of tests/conftest.py: each test is exactly one of unit, ray and e2e.

A sample suite under the real conftest's hooks, run by pytest in a subprocess (no Ray: its
``ray_cluster`` is a stand-in, only the fixture's name matters for the class).
"""

from __future__ import annotations

import subprocess

from tests.conftest import PYTHON, ROOT, cli_env

CONFTEST = """
import pytest

from tests.conftest import *  # noqa: F403  (the hooks and fixtures under test)


@pytest.fixture(scope="session")
def ray_cluster():
    yield None  # a stand-in: the sample starts no Ray
"""

SAMPLE = """
import os

import pytest

def classes(request):
    return sorted(m.name for m in request.node.iter_markers() if m.name in CLASSES)


CLASSES = {"unit", "ray", "e2e", "slow"}


def test_pure(request):
    assert classes(request) == ["unit"]


def test_on_the_shared_ray(ray_cluster, request):
    assert classes(request) == ["ray", "slow"]


@pytest.mark.slow
def test_marked_slow_the_old_way(request):
    assert classes(request) == ["e2e", "slow"]


@pytest.mark.e2e
def test_a_run_beside_the_shared_ray(ray_cluster, request):
    assert classes(request) == ["e2e", "slow"]


def test_unit_but_starts_a_ray_node():
    # what a Ray node started here (or by a CLI subprocess) leaves behind
    os.makedirs(os.path.join(os.environ["RAY_TMPDIR"], "ray", "session_latest"))
"""

CONFLICT = """
import pytest


@pytest.mark.unit
def test_says_unit_but_uses_ray(ray_cluster):
    pass
"""

INI = """
[pytest]
markers =
    slow: a ray or e2e test
    unit: no Ray
    ray: on the shared session Ray
    e2e: runs and clusters of their own
"""


def run_sample(tmp_path, sample: str) -> subprocess.CompletedProcess:
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_sample.py").write_text(sample)
    return subprocess.run(
        [
            *(PYTHON, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"),
            *("--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"), str(tmp_path)),
        ],
        cwd=tmp_path,
        env={**cli_env(), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_each_test_gets_one_cost_class_and_a_unit_test_starting_ray_fails(tmp_path):
    result = run_sample(tmp_path, SAMPLE)
    out = result.stdout
    for name in (
        "test_pure",
        "test_on_the_shared_ray",
        "test_marked_slow_the_old_way",
        "test_a_run_beside_the_shared_ray",
        "test_unit_but_starts_a_ray_node",
    ):
        assert f"PASSED test_sample.py::{name}" in out, out[-3000:]
    assert "ERROR test_sample.py::test_unit_but_starts_a_ray_node" in out, out[-3000:]
    assert "started a Ray node" in out and "mark it e2e" in out
    assert "5 passed, 1 error" in out, out[-3000:]


def test_a_test_declaring_a_class_it_does_not_have_is_refused(tmp_path):
    result = run_sample(tmp_path, CONFLICT)
    assert result.returncode == 4, result.stdout[-3000:]  # a usage error: nothing runs
    assert "test_says_unit_but_uses_ray: marked unit but uses ray_cluster" in result.stderr
