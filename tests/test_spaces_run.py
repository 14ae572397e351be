"""A Dict-observation run on the shared local Ray: PPO learns, checkpoints, and loads back."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from collector.envs.testing import CorridorEnv
from services.checkpoints.store import latest_valid
from services.config import load_config
from services.driver.controller import Controller
from services.policy import load_policy
from services.policy.export import export_policy
from tests.conftest import ROOT

# A uniformly random walk earns about 0.42 in CorridorEnv (2,000 episodes, seed 0); walking
# straight to the goal about 0.88.
RANDOM_RETURN = 0.42


def test_ppo_on_a_dict_observation_learns_and_its_checkpoint_loads(ray_cluster, tmp_path):
    config = load_config(
        ROOT / "deploy" / "configs" / "cartpole_ppo.yaml",
        [
            "collector.env_id=collector.envs.testing:corridor",
            "controller.total_frames=8192",
            "controller.stop_return=null",
            "metrics.enabled=false",
            f"checkpoint.dir={tmp_path}",
            "checkpoint.at_end=true",
        ],
    )
    controller = Controller(config)
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    assert summary["frames"] == 8192
    assert summary["episode_return_mean"] > RANDOM_RETURN + 0.3

    policy = load_policy(latest_valid(tmp_path)[0], allow_modules=["collector"])
    assert policy.version == summary["model_version"]
    env = CorridorEnv()
    returns = []
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        done, episode_return = False, 0.0
        while not done:
            action = policy.act(obs)  # the env's own Dict observation
            assert action.shape == () and action.dtype == np.int64
            obs, reward, terminated, truncated, _ = env.step(action)
            episode_return += reward
            done = terminated or truncated
        returns.append(episode_return)
    assert np.mean(returns) > RANDOM_RETURN + 0.3
    batch = {
        "agent": torch.tensor([0, 6]),
        "goal": torch.tensor([6, 0]),
        "noise": torch.zeros(2, 2),
    }
    actions = policy.act(batch)  # a batch of torch tensors: a tensor of actions
    assert isinstance(actions, torch.Tensor) and actions.tolist() == [2, 0]  # right, left
    with pytest.raises(ValueError, match=r"--format pt2: the policy takes a Dict observation"):
        export_policy(policy, "pt2", tmp_path / "policy.pt2")
