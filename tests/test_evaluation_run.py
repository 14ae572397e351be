"""A CLI run with asynchronous greedy evaluation, and Ray's tools pointed at it while it runs.

One run (a Ray start costs seconds on CI) checks: ``ray list actors`` at the logged address
lists the run's named actors (evaluator included); evaluations in ``metrics.jsonl``, the
summary and the plot; due intervals coalescing under a slow evaluator; ``keep_best``.
"""

import json
import re
import subprocess
from pathlib import Path

import pytest

from services.checkpoints.retention import checkpoint_score
from services.checkpoints.store import latest_valid
from services.plot import evaluation_points, plot_run, read_log
from tests.cli_run import CliRun, is_progress
from tests.conftest import cli_env

INTERVAL = 1000
METRIC = "evaluation/episode_return_mean"


def evaluations(run_dir: Path) -> list[dict]:
    """Distinct evaluation records of a run's metrics.jsonl, in order."""
    seen = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line).get("evaluation")
        if record:
            seen[(record["frames"], record["version"])] = record
    return list(seen.values())


def list_actors(address: str, env: dict) -> set[str]:
    """Names of the actors ``ray list actors --address`` reports, alive or still starting."""
    listed = subprocess.run(
        ["ray", "list", "actors", "--address", address, "--format", "json", "--limit", "1000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    return {a["name"] for a in json.loads(listed.stdout) if a["state"] != "DEAD"}


@pytest.mark.e2e
def test_a_run_with_evaluation_seen_through_rays_tools(tmp_path):
    run_dir = tmp_path / "run"
    args = [
        "--set",
        "controller.total_frames=4000",
        "--set",
        "controller.log_interval_s=1",
        "--set",
        f"evaluation.interval_frames={INTERVAL}",
        "--set",
        "evaluation.episodes=3",
        "--set",
        "evaluation.run_at_start=true",
        # the evaluator's first episode starts 4 s late: due intervals pile up meanwhile
        "--set",
        "evaluation.env_id=tests.slow_env:make",
        "--set",
        "evaluation.env_kwargs={first_reset_s: 4.0}",
        "--set",
        "evaluation.num_envs=1",
        "--set",
        f"checkpoint.interval_frames={INTERVAL}",
        "--set",
        "checkpoint.keep=1",
        "--set",
        "checkpoint.keep_best=2",
        "--set",
        f"run.dir={run_dir}",
        "--set",
        "ray.dashboard=true",  # `ray list actors` asks the dashboard's state API
    ]
    with CliRun(*args) as run:
        run.until(is_progress, what="a progress line")  # training: every actor is up
        ray_at = run.wait_log(r"Ray at (\S+), dashboard (\S+)")
        address, dashboard = ray_at.groups()
        tool_env = cli_env()
        # the logged command's environment (token auth, loopback)
        tool_env.update(re.findall(r"(RAY_\w+)=(\S+) ", ray_at.string))
        run_id = run.wait_log(r"run id (\S+)").group(1)
        names = list_actors(address, tool_env)
        summary = run.summary(timeout=240)
    # Ray's tools at the logged address find the run's actors by name
    assert dashboard.startswith("http://127.0.0.1:")
    expected = {f"{run_id}.{role}" for role in ("collector-0", "collector-1", "learner-0")}
    expected |= {f"{run_id}.replay-0", f"{run_id}.replay-1", f"{run_id}.evaluator"}
    assert expected <= names, names
    records = evaluations(run_dir)
    assert records[0]["version"] == 0 and records[0]["frames"] == 0  # run_at_start
    # the intervals that elapsed during the slow first evaluation coalesced into one
    assert len(records) >= 2 and records[1]["frames"] >= 2 * INTERVAL, records
    versions = [r["version"] for r in records]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert all(r["episodes"] == 3 and r["episode_length_mean"] > 0 for r in records)
    # run_at_end: the final version was evaluated and waited for; the summary reports it
    assert summary["eval_version"] == summary["published_version"] == records[-1]["version"]
    assert summary["eval_return_mean"] == round(records[-1]["episode_return_mean"], 3)
    assert summary["evaluations"] == len(records)
    # keep_best: the newest checkpoint, plus at most the two best scored ones (a checkpoint cut
    # before any evaluation finished has no score and goes with rotation)
    rotation = sorted((run_dir / "checkpoints").glob("ckpt-*"))
    newest, _ = latest_valid(run_dir / "checkpoints")
    assert newest == rotation[-1] and len(rotation) <= 3
    assert all(checkpoint_score(p, METRIC) is not None for p in rotation[:-1])
    saved = json.loads((newest / "driver.json").read_text())["evaluation"]
    assert saved["last"]["version"] == summary["eval_version"]  # the last completed one
    assert saved["next_due_frames"] % INTERVAL == 0 and saved["next_due_frames"] > 4000
    points = evaluation_points(read_log(run_dir))  # the plot's greedy-evaluation curve
    assert [frames for frames, _ in points] == sorted({r["frames"] for r in records})
    assert plot_run(run_dir).stat().st_size > 0
