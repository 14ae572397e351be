"""A CLI run with asynchronous greedy evaluation: logs, summary, coalescing, keep_best, resume."""

import json
from pathlib import Path

from services.checkpoint import latest_valid
from services.plot import evaluation_points, plot_run, read_log
from services.retention import checkpoint_score
from tests.conftest import run_cli

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


def test_evaluation_runs_beside_training_coalesces_and_ranks_checkpoints(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
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
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.splitlines()[-1])
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
