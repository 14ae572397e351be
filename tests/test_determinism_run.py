"""Deterministic runs (``run.deterministic``) on the shared local Ray: same seed, same bits."""

from __future__ import annotations

import pytest

from services.config import load_config
from services.driver.controller import Controller
from services.driver.loops.deterministic import DeterminismError

# 2 collectors, 2 shards, 2 learner ranks, prioritized replay: the CI-sized config.
DQN = [
    "algorithm=dqn",
    "run.deterministic=true",
    "checkpoint.interval_s=0",
    "checkpoint.at_end=false",
    "collector.num_collectors=2",
    "collector.envs_per_collector=4",
    "collector.rollout_frames=128",
    "replay.num_shards=2",
    "replay.capacity=20000",
    "replay.sampler=prioritized",
    "learner.update_priorities=true",
    "learner.world_size=2",
    "learner.global_batch_size=32",
    "controller.init_random_frames=512",
    "controller.utd_ratio=0.125",
    "controller.total_frames=3072",
    "controller.log_interval_s=1",
    "metrics.enabled=false",
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
    return [(v, {k: m for k, m in metrics.items() if k.startswith("loss")}) for v, metrics in rounds]


@pytest.fixture(scope="module")
def dqn_runs(ray_cluster):
    return [run([*DQN, f"run.name=det-dqn-{i}"]) for i in range(2)]


def test_two_deterministic_dqn_runs_end_in_the_same_bits(dqn_runs):
    (first, first_rounds), (second, second_rounds) = dqn_runs
    assert first["optim_steps"] > 20
    assert first["digest"] is not None
    assert first["digest_parts"] == second["digest_parts"]
    assert first["digest"] == second["digest"]
    assert losses(first_rounds) == losses(second_rounds)
