"""``python -m services.sweep`` end to end on its embedded Ray, and its argument refusals."""

import csv
import json
import subprocess

import numpy as np
import pytest

from services import sweep
from tests.conftest import PYTHON, ROOT, cli_env

TINY = [
    "controller.total_frames=2500",
    "controller.log_interval_s=1",
    "controller.init_random_frames=500",
    "collector.num_collectors=1",
    "collector.envs_per_collector=4",
    "collector.rollout_frames=128",
    "replay.num_shards=1",
    "learner.global_batch_size=32",
    "controller.utd_ratio=0.125",
]


def run_sweep(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "services.sweep", *args],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_sweep_over_three_seeds_writes_tables_and_plot_matching_run_summaries(tmp_path):
    sets = [arg for item in TINY for arg in ("--set", item)]
    result = run_sweep("--seeds", "0,1,2", *sets, "--dir", str(tmp_path / "sweep"))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    final = json.loads(lines[-1])
    for seed in (0, 1, 2):  # progress per run
        assert any(ln.startswith(f"[default seed={seed}] frames ") for ln in lines), seed
    assert [r["seed"] for r in final["runs"]] == [0, 1, 2]
    assert all(r["status"] == "succeeded" for r in final["runs"])
    with open(final["runs_csv"]) as file:
        rows = list(csv.DictReader(file))
    returns = []
    run_dirs = set()
    for row in rows:
        run_dir = tmp_path / "sweep" / row["run_id"]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["run_id"] == row["run_id"] and summary["seed"] == int(row["seed"])
        for field in ("frames", "optim_steps", "episodes"):
            assert int(row[field]) == summary[field], field
        for field in ("episode_return_mean", "wall_s", "frames_per_s"):
            assert float(row[field]) == summary[field], field
        assert summary["frames"] >= 2500 and (run_dir / "metrics.jsonl").exists()
        returns.append(summary["episode_return_mean"])
        run_dirs.add(run_dir)
    assert len(run_dirs) == 3
    with open(final["points_csv"]) as file:
        (point,) = list(csv.DictReader(file))
    assert float(point["episode_return_mean_mean"]) == pytest.approx(np.mean(returns), abs=1e-3)
    assert float(point["episode_return_mean_std"]) == pytest.approx(np.std(returns), abs=1e-3)
    assert "| run_id | seed |" in (tmp_path / "sweep" / "summary.md").read_text()
    png = tmp_path / "sweep" / "return_vs_frames.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--seeds", "0,0"], "--seeds"),
        (["--grid", "learner.lr"], "--grid"),
        (["--grid", "learner.world_size=1,0"], "learner.world_size"),
        (["--set", "metrics.port=9000"], "metrics.port"),
        (["--set", "run.dir=/tmp/x"], "run.dir"),
    ],
)
def test_invalid_sweeps_exit_before_any_run(args, field, tmp_path, capsys):
    assert sweep.main([*args, "--dir", str(tmp_path / "sweep")]) == 2
    message = capsys.readouterr().err.strip().splitlines()
    assert len(message) == 1 and field in message[0], message
    assert not (tmp_path / "sweep").exists()
