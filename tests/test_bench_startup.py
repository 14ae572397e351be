"""``python -m services.bench startup``: the start-up floors, measured in fresh processes."""

import json
import subprocess

import pytest

from tests.conftest import PYTHON, ROOT, cli_env


@pytest.mark.slow
def test_the_startup_bench_reports_each_floor_and_their_sum():
    result = subprocess.run(
        [PYTHON, "-m", "services.bench", "startup", "--repeats", "1", "--actors", "1", "--no-run"],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("import_ray_s", "import_torch_s", "ray_init_s", "torch_actor_s"):
        assert report[key] > 0 and report[f"{key}_all"] == [report[key]], key
    assert report["more_torch_actors_s"] > 0 and "run_startup_s" not in report
    # The floor is one process's whole path: Ray's start, then the first torch actor's.
    assert report["floor_s"] >= report["ray_init_s"] + report["torch_actor_s"] - 0.02
