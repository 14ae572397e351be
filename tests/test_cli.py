"""End-to-end runs of ``python -m services.train`` as a subprocess."""

import json
from pathlib import Path

import pytest

from services import evaluate, train
from tests.conftest import run_cli


@pytest.mark.e2e
def test_default_job_learns_cartpole(tmp_path, joining_env, capsys):
    # On the session's Ray (the embedded start: test_relayrl_cli, test_faults, test_grpc_run).
    result = run_cli(
        "--config",
        "deploy/configs/cartpole_dqn.yaml",
        "--set",
        "seed=0",
        "--set",
        "controller.total_frames=30000",
        "--set",
        f"run.dir={tmp_path / 'run'}",
        "--set",  # one greedy evaluation, of the final version
        "evaluation.interval_frames=1000000000",
        "--set",
        "evaluation.episodes=3",
        env=joining_env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert any(line.startswith("frames ") for line in lines[:-1])  # progress lines
    assert 30_000 <= summary["frames"] < 30_000 + 2 * 256
    assert summary["optim_steps"] == summary["model_version"] > 0
    assert summary["wall_s"] > 0 and summary["frames_per_s"] > 0
    # A random policy averages about 22 on CartPole; the asynchronous loop's policy lag, and so
    # the return at a fixed budget, varies with the load on a shared 2-core machine (135-300).
    assert summary["episode_return_mean"] >= 100, summary
    assert (tmp_path / "run" / "config.yaml").exists()
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") >= 1

    # After training: the evaluate command replays that evaluation and records it. Its main in
    # this process (``python -m services.evaluate`` exits with what it returns; the ``-m`` form
    # itself: test_relayrl_cli), without a second Python and torch start-up.
    video = tmp_path / "video"
    capsys.readouterr()
    played = evaluate.main([str(tmp_path / "run"), "--video", str(video), "--video-every", "2"])
    out, err = capsys.readouterr()
    assert played == 0, err[-3000:]
    lines = out.strip().splitlines()
    replay = json.loads(lines[-1])
    assert [line.split(":")[0] for line in lines[:-1]] == ["episode 1", "episode 2", "episode 3"]
    assert replay["version"] == summary["eval_version"] == summary["published_version"]
    assert round(replay["return_mean"], 3) == summary["eval_return_mean"]  # the same episodes
    assert replay["episodes"] == 3 and replay["return_std"] >= 0
    files = [Path(f) for f in replay["video_files"]]  # env 0 plays 2 episodes, env 1 one
    assert sorted(f.name for f in files) == ["env0-episode-0.mp4", "env1-episode-0.mp4"]
    assert all(f.parent == video and f.stat().st_size > 1000 for f in files)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("learner.world_size=0", "learner.world_size"),
        ("learner.no_such_key=1", "learner.no_such_key"),
        ("learner.global_batch_size=65", "learner.global_batch_size"),
        ("collector.env_id=NoSuchEnv-v9", "collector.env_id"),
    ],
)
def test_invalid_config_exits_before_any_actor(override, field, tmp_path, capsys):
    # The CLI's main in this process (``python -m services.train`` exits with what it returns),
    # without a Python start-up per case: a unit test, failed by its guard if Ray starts.
    extra = ["--set", "learner.world_size=2"] if "global_batch" in override else []
    assert train.main(["--set", override, *extra, "--set", f"run.dir={tmp_path}"]) == 2
    out, err = capsys.readouterr()
    message = err.strip().splitlines()
    assert len(message) == 1 and field in message[0], err
    assert "Ray" not in err and "Ray" not in out  # no cluster
    assert not any(tmp_path.iterdir())  # nothing written
