"""Deterministic runs (``run.deterministic``) on the shared local Ray: same seed, same bits."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import ray

from services.config import load_config
from services.driver.controller import Controller
from services.driver.loops.deterministic import DeterminismError
from services.run.launch import prepare_run

# 2 collectors, 2 shards, 2 learner ranks: the CI-sized config.
BASE = [
    "run.deterministic=true",
    "checkpoint.interval_s=0",
    "checkpoint.at_end=false",
    "collector.num_collectors=2",
    "collector.envs_per_collector=4",
    "collector.rollout_frames=128",
    "replay.num_shards=2",
    "learner.world_size=2",
    "controller.log_interval_s=1",
    "metrics.enabled=false",
]
OFF_POLICY = [  # prioritized replay
    *BASE,
    "replay.capacity=20000",
    "replay.sampler=prioritized",
    "learner.update_priorities=true",
    "learner.global_batch_size=32",
    "controller.init_random_frames=512",
    "controller.utd_ratio=0.125",
]
DQN = ["algorithm=dqn", *OFF_POLICY, "controller.total_frames=3072"]
PPO = [
    "algorithm=ppo",
    *BASE,
    "learner.onpolicy.num_epochs=2",
    "learner.onpolicy.num_minibatches=4",
    "controller.total_frames=1024",
]
SAC = [
    "algorithm=sac",
    "collector.env_id=Pendulum-v1",
    *OFF_POLICY,
    "controller.total_frames=1536",
]


def run(overrides, *, hooks=()):
    """Runs a config; returns its summary and every round's metrics, in order."""
    config = load_config(overrides=overrides)
    controller = Controller(config)
    rounds = []
    controller.register("round", lambda c, r: rounds.append((r.model_version, r.metrics)))
    for event, hook in hooks:
        controller.register(event, hook)
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    return summary, rounds


def losses(rounds):
    """Each round's version and loss terms."""
    return [(v, {k: x for k, x in m.items() if k.startswith("loss")}) for v, m in rounds]


def straight_frames(runs):
    return runs[0][0]["frames"]


def run_train(overrides, storage):
    """Runs a config as the CLI does (run directory, ``metrics.jsonl``) on the shared Ray."""
    config = load_config(overrides=[*overrides, f"run.storage={storage}"])
    summary = prepare_run(config).execute()
    lines = (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    return summary, [json.loads(line) for line in lines]


def logged(records):
    """What two deterministic runs' logs share line by line: counts, versions, losses."""
    keys = ("frames", "optim_steps", "model_version", "episodes")
    return [({k: r[k] for k in keys}, r["learner"]) for r in records]


@pytest.fixture(scope="module")
def dqn_runs(ray_cluster, tmp_path_factory):
    """Two runs of the same deterministic config, each with its run directory."""
    storage = tmp_path_factory.mktemp("det-storage")
    return [run_train([*DQN, f"run.name=det-dqn-{i}"], storage) for i in range(2)]


def test_two_deterministic_dqn_runs_end_in_the_same_bits(dqn_runs):
    (first, first_log), (second, second_log) = dqn_runs
    assert first["optim_steps"] > 20
    assert first["digest"] is not None
    assert first["digest_parts"] == second["digest_parts"]
    assert first["digest"] == second["digest"]
    # metrics.jsonl: one line per tick, the same losses step by step.
    assert len(first_log) > 10
    assert any(line["learner"].get("loss_q") for line in first_log)
    assert logged(first_log) == logged(second_log)


def test_stopped_and_resumed_equals_straight_through(ray_cluster, dqn_runs, tmp_path):
    # The fixture's runs cut (without a checkpoint dir) every quarter: 768 frames, 3 ticks.
    cuts = [f"checkpoint.dir={tmp_path}", "checkpoint.interval_frames=768"]
    half, _ = run(
        [*DQN, "run.name=det-half", "controller.total_frames=1536", *cuts, "checkpoint.at_end=true"]
    )
    assert 1536 <= half["frames"] < straight_frames(dqn_runs)
    config = load_config(overrides=[*DQN, "run.name=det-resumed", *cuts])
    controller = Controller(config, resume_from=tmp_path)
    try:
        resumed = controller.run()
    finally:
        controller.shutdown()
    straight, _ = dqn_runs[0]
    assert resumed["frames"] == straight["frames"]
    assert resumed["digest_parts"] == straight["digest_parts"]
    assert resumed["digest"] == straight["digest"]


def test_a_killed_collector_stops_a_deterministic_run_naming_it(ray_cluster):
    config = load_config(overrides=[*DQN, "run.name=det-kill", "controller.total_frames=100000"])
    controller = Controller(config)
    killed = []

    def kill_collector_0(ctrl, receipt):
        if receipt.collector_id == 1 and receipt.seq == 3 and not killed:
            killed.append(ray.get(ctrl.collectors.actors[0].pid.remote()))
            os.kill(killed[0], signal.SIGKILL)  # as an operator would, by pid

    controller.register("rollout", kill_collector_0)
    try:
        controller.setup()
        with pytest.raises(DeterminismError, match=r"collector-0 died.*Resume from the last"):
            controller.train()
        assert killed and controller.counters.collected_frames < 100000
    finally:
        controller.shutdown()


@pytest.mark.parametrize(("name", "overrides"), [("ppo", PPO), ("sac", SAC)])
def test_deterministic_ppo_and_sac_runs_end_in_the_same_bits(ray_cluster, name, overrides):
    (first, first_rounds), (second, second_rounds) = [
        run([*overrides, f"run.name=det-{name}-{i}"]) for i in range(2)
    ]
    assert first["optim_steps"] > 10
    assert first["digest_parts"] == second["digest_parts"]
    assert losses(first_rounds) == losses(second_rounds)
