"""Masked and factorised actions through a whole run on the shared Ray (CI-sized budgets).

Collectors act under Connect Four's mask (``collector.action_mask_key``), replay stores the
masks, learners train on them, and the run's checkpoint plays under them again through
``load_policy`` and ``evaluate_policy``; QMIX does the same with one mask per agent
(``tests.masked_agents``); ``MultiDiscrete`` and ``MultiBinary`` actions go the same way with
PPO.
"""

from __future__ import annotations

import numpy as np
import pytest

from collector.envs.connect4 import ConnectFour
from collector.envs.multiagent import ParallelVectorEnv
from services.config import load_config
from services.driver.controller import Controller
from services.evaluation.playback import evaluate_policy
from services.policy import load_policy
from tests.conftest import ROOT
from tests.masked_agents import parallel_env

CONFIGS = ROOT / "deploy" / "configs"
# Random against random, the first player's mean return is 0.12 (collector.envs.connect4).
RANDOM_RETURN = 0.12


def run(config_path, tmp_path, *overrides) -> dict:
    config = load_config(
        config_path,
        [
            "metrics.enabled=false",
            f"checkpoint.dir={tmp_path}",
            "checkpoint.interval_frames=0",
            "checkpoint.at_end=true",
            "controller.log_interval_s=1",
            *overrides,
        ],
    )
    controller = Controller(config)
    try:
        return controller.run()
    finally:
        controller.shutdown()


def test_masked_ppo_beats_random_connect4_and_never_plays_an_illegal_column(ray_cluster, tmp_path):
    summary = run(CONFIGS / "connect4_ppo_masked.yaml", tmp_path, "controller.total_frames=20480")
    assert summary["frames"] == 20480 and summary["invalid_actions"] == 0
    assert summary["episode_return_mean"] > RANDOM_RETURN + 0.3  # about 0.7
    policy = load_policy(tmp_path)
    played = evaluate_policy(policy, episodes=40)  # greedy, under the env's masks
    assert played["return_mean"] > RANDOM_RETURN + 0.3
    obs, _ = ConnectFour().reset(seed=0)
    only = np.array([0, 0, 1, 0, 0, 0, 0], np.int8)
    assert policy.act({**obs, "action_mask": only}) == 2
    assert policy.act(obs["observation"], deterministic=False, mask=only) == 2


def test_masked_dqn_explores_and_acts_greedily_among_legal_columns_only(ray_cluster, tmp_path):
    summary = run(
        CONFIGS / "connect4_dqn_masked.yaml",
        tmp_path,
        "controller.total_frames=6144",
        "controller.init_random_frames=2048",  # uniform draws among the legal columns first
        "collector.epsilon_anneal_frames=3072",  # then epsilon-greedy down to 0.02
        "replay.capacity=8192",
    )
    assert summary["frames"] >= 6144 and summary["optim_steps"] > 0
    assert summary["invalid_actions"] == 0
    policy = load_policy(tmp_path)
    played = evaluate_policy(policy, episodes=8)
    assert played["episodes"] == 8 and all(r in (-1.0, 0.0, 1.0) for r in played["returns"])


def test_qmix_acts_under_each_agents_mask_through_a_run_and_load_policy(ray_cluster, tmp_path):
    summary = run(
        CONFIGS / "spread_qmix.yaml",
        tmp_path,
        "collector.env_id=tests.masked_agents:parallel_env",
        "collector.env_kwargs={}",
        "collector.action_mask_key=action_mask",
        "collector.envs_per_collector=4",
        "collector.rollout_frames=48",
        "collector.epsilon_anneal_frames=768",
        "controller.total_frames=1536",
        "controller.init_random_frames=384",  # uniform draws among each agent's allowed actions
        "controller.utd_ratio=0.25",
        "learner.global_batch_size=64",
        "replay.capacity=4096",
    )
    assert summary["frames"] >= 1536 and summary["optim_steps"] > 0
    assert summary["invalid_actions"] == 0
    policy = load_policy(tmp_path, allow_modules=["tests"])
    assert policy.family == "agents"
    envs = ParallelVectorEnv([parallel_env] * 2, action_mask_key="action_mask")
    obs, info = envs.reset(seed=[5, 6])
    for _ in range(14):  # greedy, under the masks the wrapper reports, through auto-resets
        obs, _, _, _, info = envs.step(policy.act(obs, mask=info["action_mask"]))
    assert sum(env.illegal for env in envs.envs) == 0
    played = evaluate_policy(policy, episodes=4)
    assert played["episodes"] == 4 and min(played["returns"]) >= 0  # forbidden ones pay -1


@pytest.mark.parametrize(
    ("env_id", "shape", "random_return"),
    [
        ("tests.action_envs:multi_discrete", (2,), 6.67),  # (1/3 + 1/2) x 8 steps
        ("tests.action_envs:multi_binary", (3,), 12.0),  # 3 x 1/2 x 8 steps
    ],
)
def test_factorised_actions_train_checkpoint_and_load(
    ray_cluster, tmp_path, env_id, shape, random_return
):
    summary = run(
        CONFIGS / "cartpole_ppo.yaml",
        tmp_path,
        f"collector.env_id={env_id}",
        "controller.total_frames=6144",
        "controller.stop_return=null",
        "learner.lr_scheduler=none",
        "learner.onpolicy.num_epochs=5",
    )
    assert summary["frames"] == 6144
    assert summary["episode_return_mean"] > random_return + 1.0
    policy = load_policy(tmp_path, allow_modules=["tests"])
    observation = np.ones(policy.observation_shape, np.float32)
    action = policy.act(observation)
    assert action.shape == shape and action.dtype == np.int64
    assert policy.action_space.contains(action.astype(policy.action_space.dtype))
    assert policy.act(np.stack([observation] * 5)).shape == (5, *shape)
