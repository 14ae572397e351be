"""``python -m services.bench learn``: the suites, the figures, the plot, the refusals, a smoke."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from services.bench.learning import learn
from services.bench.learning.learn_plot import plot_entry
from services.bench.learning.learn_suite import ENTRIES, SUITES, Entry, Reference, suite
from services.config import ConfigError
from tests.conftest import PYTHON, ROOT, cli_env

CONFIGS = ROOT / "deploy" / "configs"


def test_every_entry_names_a_shipped_config_whose_header_names_its_reference():
    for entry in ENTRIES.values():
        text = (CONFIGS / entry.config).read_text()
        header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
        repository = entry.reference.source.split(" ")[0]
        assert "Reference" in header and repository in header, (entry.name, repository)


def test_the_cpu_suite_is_the_issue_s_and_full_holds_everything():
    cpu = {entry.name for entry in suite("cpu")}
    assert {e.name for e in suite("full")} == set(ENTRIES)
    assert {"cartpole-dqn", "cartpole-ppo", "cartpole-a2c", "cartpole-reinforce"} <= cpu
    assert {"lunarlander-dqn", "lunarlander-ppo", "mountaincar-sac", "pong-ppo-smoke"} <= cpu
    assert not any("gpu" in ENTRIES[name].config for name in cpu)
    with pytest.raises(ValueError, match="--suite"):
        suite("gpu")
    with pytest.raises(ValueError, match="suites"):
        Entry("x", "x.yaml", 1.0, 10, Reference(None, 0.0, "s"), suites=("cpu",))
    assert SUITES == ("cpu", "full")


def test_a_run_stops_at_the_threshold_and_the_budget_and_keeps_its_curve():
    entry = ENTRIES["lunarlander-ppo"]
    overrides = learn.run_overrides(entry, 2, Path("/data"), 5000, ("learner.lr=0.001",))
    assert overrides[:2] == ["learner.lr=0.001", "seed=2"]
    assert "controller.total_frames=5000" in overrides
    assert "controller.stop_return=200.0" in overrides
    assert "controller.return_milestones=[200.0]" in overrides
    assert "controller.episode_window=20" in overrides
    assert "run.storage=/data" in overrides
    with pytest.raises(ValueError, match="unknown"):
        learn.select("cpu", "cartpole-ppo,nope")
    assert [e.name for e in learn.select("cpu", "hopper-sac")] == ["hopper-sac"]


def fake_runs(frames):
    return [
        {
            "seed": seed,
            "frames_to_threshold": reached,
            "seconds_to_threshold": None if reached is None else 10.0,
            "final_return": 1.0,
            "wall_s": 12.0,
            "curve": [(1000, -100.0), (2000, 50.0), (3000, 210.0)],
        }
        for seed, reached in enumerate(frames)
    ]


def test_the_summary_counts_seeds_that_reached_and_compares_with_the_reference(tmp_path):
    entry = ENTRIES["lunarlander-ppo"]
    runs = fake_runs([800_000, None, 1_200_000])
    summary = learn.summarize(entry, runs, 1_500_000)
    assert summary["solved"] == "2/3"
    assert summary["frames_to_threshold"] == [800_000, None, 1_200_000]
    assert summary["frames_to_threshold_median"] == 1_000_000
    assert summary["vs_reference"] == 1.0  # the zoo's 1 M frames
    assert summary["reference"]["source"].startswith("DLR-RM/rl-baselines3-zoo")
    assert summary["wall_s"] == [12.0, 12.0, 12.0]
    assert learn.summarize(entry, fake_runs([None]), 10)["vs_reference"] is None
    path = plot_entry(entry, runs, tmp_path)
    assert path == tmp_path / "lunarlander-ppo.png" and path.stat().st_size > 10_000
    smoke = plot_entry(ENTRIES["pong-dqn-smoke"], fake_runs([None]), tmp_path)  # return only
    assert smoke.exists()


def test_a_gpu_entry_is_refused_up_front_on_a_host_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    with pytest.raises(ConfigError, match=r"^pong-dqn \(pong_dqn_gpu.yaml\): learner\.resources"):
        learn.check_entries([ENTRIES["pong-dqn"]])
    learn.check_entries([ENTRIES["cartpole-ppo"]], ("learner.lr=0.002",))


def test_an_entry_needing_a_missing_extra_is_refused_naming_it():
    # Box2D hidden from this process: LunarLander cannot be made; nothing runs (exit code 2).
    code = (
        "import sys; sys.modules['Box2D'] = None\n"
        "from services.bench.learning.learn import main\n"
        "sys.exit(main(['--entries', 'cartpole-ppo,lunarlander-dqn', '--out', sys.argv[1]]))\n"
    )
    out = ROOT / "no-such-dir-is-made"
    result = subprocess.run(
        [PYTHON, "-c", code, str(out)],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "lunarlander-dqn (lunarlander_dqn.yaml): collector.env_id" in result.stderr
    assert 'the box2d extra is not installed: pip install "relayrl[box2d]"' in result.stderr
    assert not out.exists() and result.stdout == ""


@pytest.mark.slow
def test_the_bench_runs_an_entry_to_its_budget_and_plots_it(tmp_path):
    result = subprocess.run(
        [
            *(PYTHON, "-m", "services.bench", "learn", "--entries", "cartpole-ppo"),
            *("--seeds", "1", "--frames", "1024", "--out", str(tmp_path)),
        ],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    entry = report["entries"]["cartpole-ppo"]
    assert entry["frame_budget"] == 1024 and entry["solved"] == "0/1"  # 475 is not reached
    assert entry["frames_to_threshold"] == [None] and entry["vs_reference"] is None
    assert entry["reference"]["frames"] == 100_000
    assert len(entry["wall_s"]) == 1 and entry["wall_s"][0] > 0
    assert Path(entry["plot"]).exists() and Path(entry["plot"]).parent == tmp_path
    assert "cartpole-ppo seed 0:" in result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert learn.read_curve(run_dir)[-1][0] >= 1024


def test_parallel_seeds_come_back_in_seed_order_and_a_sigterm_stops_every_run(tmp_path):
    started = []

    def seed_run(seed):
        started.append(seed)
        return {"seed": seed}

    assert learn.run_seeds(seed_run, 3, parallel=2) == [{"seed": s} for s in range(3)]
    assert sorted(started) == [0, 1, 2]

    # Two real runs that would take 60 s; a SIGTERM to the bench stops both at once.
    def slow_run(seed):
        pid_file = tmp_path / f"run-{seed}.pid"
        sleeper = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid()));"
        sleeper += " time.sleep(60)"
        learn.run_cli([PYTHON, "-c", sleeper, str(pid_file)], timeout=120)
        return {"seed": seed}

    def terminate_when_both_run():
        while len(list(tmp_path.glob("*.pid"))) < 2 or any(
            not f.read_text() for f in tmp_path.glob("*.pid")
        ):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_when_both_run, daemon=True).start()
    begun = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        learn.run_seeds(slow_run, 2, parallel=2)
    assert time.monotonic() - begun < 30  # not the runs' 60 s
    assert not learn.RUNNING
    for pid_file in tmp_path.glob("*.pid"):
        with pytest.raises(ProcessLookupError):  # exited and reaped
            os.kill(int(pid_file.read_text()), 0)
