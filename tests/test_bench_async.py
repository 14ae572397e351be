"""``python -m services.bench async`` at CI size: both loops' figures in its JSON line."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import PYTHON, ROOT, cli_env


@pytest.mark.e2e
def test_the_bench_reports_both_loops_and_their_ratio():
    command = ["-m", "services.bench", "async", "--tasks", "cartpole", "--repeats", "1"]
    # 4,096 frames an arm: 8 lockstep iterations of 512 frames, 4 asynchronous batches of 1,024
    # steps; the figures' plumbing is what is checked, not their size.
    done = subprocess.run(
        [PYTHON, *command, "--cartpole-frames", "4096"],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    lockstep, asynchronous = report["args"]["arms"]
    cartpole = report["tasks"]["cartpole"]
    for arm in (lockstep, asynchronous):
        figures = cartpole[arm]
        assert figures["frames"] >= 4096 and figures["frames_per_s"] > 0, arm
        assert 0 <= figures["collector_wait_fraction"] <= 1, arm
        # stepping is part of a rollout's work: the wait leaves at least the stepping share out
        stepping = figures["collector_stepping_fraction"]
        assert 0 < stepping <= 1 - figures["collector_wait_fraction"] + 1e-3, arm
        assert 0 <= figures["dropped_fraction"] < 1, arm
        assert 0 < figures["learner_busy_fraction"] <= 1, arm
        assert len(figures["frames_per_s_all"]) == 1, arm
    assert cartpole[lockstep]["policy_lag_p99"] == cartpole[lockstep]["dropped_fraction"] == 0
    assert cartpole[asynchronous]["policy_lag_p99"] >= cartpole[asynchronous]["policy_lag_p50"]
    ratio = cartpole[f"{asynchronous}_over_{lockstep}_frames_per_s"]
    assert ratio == pytest.approx(
        cartpole[asynchronous]["frames_per_s"] / cartpole[lockstep]["frames_per_s"], rel=0.01
    )
    assert "sample_factory" not in cartpole  # only with --sample-factory
    assert report["machine"]["cpu_count"] >= 1
    assert "frames/s" in done.stderr  # the table
