"""IQL, VDN and QMIX end to end on the shared local Ray: learning, and checkpoint and resume."""

import dataclasses

import numpy as np
import pytest
import torch

from services.bench.learning.marl import random_play
from services.config import load_config
from services.driver.controller import Controller
from services.evaluation.evaluator import EvaluationRunner
from services.evaluation.playback import evaluate_policy
from services.policy import load_policy
from tests.conftest import ROOT

CONFIGS = ROOT / "deploy" / "configs"


# QMIX's run also ends with a greedy evaluation and a checkpoint, for load_policy to replay.
EVALUATED = [
    "checkpoint.at_end=true",
    "evaluation.interval_frames=1000000000",
    "evaluation.episodes=16",  # greedy returns vary: 16 episodes keep the mean off the baseline
]


@pytest.mark.parametrize("name", ["spread_iql.yaml", "spread_vdn.yaml", "spread_qmix.yaml"])
def test_spread_configs_learn_well_above_random(ray_cluster, tmp_path, name):
    config = load_config(
        CONFIGS / name,
        [
            "metrics.enabled=false",
            f"checkpoint.dir={tmp_path}",
            "checkpoint.at_end=false",
            "controller.total_frames=10000",
            "controller.init_random_frames=500",
            "controller.utd_ratio=0.25",
            "collector.epsilon_anneal_frames=5000",
            "learner.global_batch_size=128",
            *(EVALUATED if name == "spread_qmix.yaml" else []),
        ],
    )
    baseline = random_play(config.collector.env_id, config.collector.env_kwargs)["return_mean"]
    assert -95 < baseline < -70  # Spread, 3 agents, 25 steps: about -81
    controller = Controller(config)
    if config.evaluation.enabled:  # the evaluator plays the multi-agent envs too
        EvaluationRunner(config, controller).attach()
    rounds = []
    controller.register("round", lambda c, r: rounds.append(r))
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    assert summary["frames"] == summary["transitions"] >= 10000
    assert summary["optim_steps"] == summary["model_version"] > 2000
    assert {"loss_q", "q_mean", "q_tot_mean"} <= set(rounds[-1].metrics)
    # The mean over the last 100 episodes (epsilon 0.05 by then) beats random play clearly.
    assert summary["episode_return_mean"] > baseline + 8, (summary, baseline)
    if not config.evaluation.enabled:
        return
    # Loaded without Ray, each agent's greedy action replays the final evaluation exactly.
    policy = load_policy(tmp_path)
    assert policy.family == "agents" and policy.version == summary["eval_version"]
    replay = evaluate_policy(policy)
    assert replay["episodes"] == 16
    assert round(replay["return_mean"], 3) == summary["eval_return_mean"] > baseline
    assert policy.act(np.zeros((3, 18), np.float32)).shape == (3,)  # one action per agent


SMALL = [
    "metrics.enabled=false",
    "collector.num_collectors=1",  # each actor imports torch as it starts: no more than needed
    "collector.envs_per_collector=4",
    "collector.rollout_frames=100",
    "collector.n_step=3",
    "replay.num_shards=2",
    "replay.capacity=20000",
    "replay.sampler=prioritized",
    "learner.update_priorities=true",
    "learner.global_batch_size=64",
    "learner.marl.prev_action=true",
    "controller.init_random_frames=500",
]


def test_qmix_resumed_at_other_sizes_continues_with_identical_counters(ray_cluster, tmp_path):
    root = tmp_path / "ckpts"
    config = load_config(
        CONFIGS / "spread_qmix.yaml",
        [*SMALL, "run.name=marl-a", "controller.total_frames=3000", f"checkpoint.dir={root}"],
    )
    first = Controller(config)
    try:
        first.setup()
        first.train()  # ends with a checkpoint (checkpoint.at_end)
        params = first.learners.parameters()
        counters = dataclasses.asdict(first.counters)
    finally:
        first.shutdown()
    assert first.last_checkpoint is not None and counters["collected_frames"] >= 3000
    assert counters["optim_steps"] == counters["model_version"] > 0

    resumed = load_config(
        CONFIGS / "spread_qmix.yaml",
        [
            *SMALL,
            "run.name=marl-b",
            "controller.total_frames=5000",
            f"checkpoint.dir={tmp_path}/b",
            # at other sizes (#28): 2 collectors, 1 shard, 2 learner ranks
            "collector.num_collectors=2",
            "replay.num_shards=1",
            "learner.world_size=2",
        ],
    )
    second = Controller(resumed, resume_from=root)
    try:
        second.setup()
        c = second.counters
        for key in ("collected_frames", "transitions", "optim_steps", "model_version", "episodes"):
            assert getattr(c, key) == counters[key], key
        assert c.generation == counters["generation"] + 1
        for rank in range(2):  # both new ranks hold the saved replica
            restored = second.learners.parameters(rank)
            assert set(restored) == set(params)
            for name, value in params.items():
                torch.testing.assert_close(restored[name], value, rtol=0, atol=0)
        # Restored replay keeps the agent dimension (and prioritized replay's weights).
        batch = second.replay.sample(16)
        assert batch["observation"].shape == batch["next_observation"].shape == (16, 3, 18 + 5)
        assert batch["state"].shape == (16, 54) and batch["action"].shape == (16, 3)
        assert batch["weight"].shape == (16,)
        second.train()
        assert c.collected_frames >= 5000
        assert c.optim_steps == c.model_version > counters["optim_steps"]
        assert c.episodes > counters["episodes"]
    finally:
        second.shutdown()
