"""Per-agent action masks for IQL, VDN and QMIX, unit level (no Ray).

The env is ``tests.masked_agents`` (each agent's allowed actions change every step); the run
through collectors, replay, learners and ``load_policy`` is in ``test_masked_run.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from collector.envs.masks import count_invalid
from collector.envs.multiagent import ParallelVectorEnv
from collector.networks.agents import AgentQNetwork, AgentQSpec
from collector.rollout import RolloutWorker
from learner.losses.marl import MultiAgentQLoss
from services.config import ConfigError, load_config
from services.config.spec import env_spaces, model_spec_for
from services.evaluation.playback import evaluate_policy
from services.policy.policy import Policy
from tests.conftest import ROOT
from tests.masked_agents import parallel_env

ENV = "tests.masked_agents:parallel_env"
KEY = "action_mask"
MASKED = [f"collector.env_id={ENV}", "collector.env_kwargs={}", f"collector.action_mask_key={KEY}"]


def config_of(algorithm: str, *overrides: str):
    """The shipped Spread config of ``algorithm`` on the masked env."""
    return load_config(ROOT / "deploy" / "configs" / f"spread_{algorithm}.yaml", list(overrides))


# As collectors run: one torch thread (small forwards on a busy host).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("mask_in", ["observation", "info"])
def test_the_wrapper_reads_each_agents_mask_from_its_observation_or_its_info(mask_in):
    envs = ParallelVectorEnv([lambda: parallel_env(mask_in=mask_in)] * 3, action_mask_key=KEY)
    assert envs.single_observation_space["observation"].shape == (2, 5)  # the mask is out
    obs, info = envs.reset(seed=[1, 2, 3])
    for _ in range(8):  # through an episode's end and its auto-reset
        masks = info[KEY]
        assert masks.shape == (3, 2, 4) and masks.dtype == bool
        assert np.array_equal(masks, obs["observation"][..., :4] > 0.5)  # the env's own copy
        obs, _, _, _, info = envs.step(np.zeros((3, 2), np.int64))


def test_the_multi_agent_worker_never_takes_a_forbidden_action():
    spec = AgentQSpec(obs_dim=5, n_agents=2, num_actions=4, state_dim=10, hidden_sizes=(16,))
    envs = spec.make_vector_env(ENV, 4, action_mask_key=KEY)
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    worker = RolloutWorker(envs, policy, [1, 2, 3, 4], n_step=2, action_mask_key=KEY)
    for explore in ({"random": True}, {"epsilon": 0.3}, {"deterministic": True}):
        batch = worker.rollout(num_steps=24, explore=explore, policy_version=0)
        assert batch.invalid_actions == 0
        columns = batch.transitions
        mask, action = columns["action_mask"], columns["action"]
        assert mask.shape == (len(action), 2, 4) and columns["next_action_mask"].shape == mask.shape
        assert np.take_along_axis(mask, action[..., None], -1).all()  # stored: allowed ones
        assert np.array_equal(
            columns["next_action_mask"], columns["next_observation"][..., :4] > 0.5
        )
        # The count can fail: uniform actions under the same masks break them often.
        uniform = np.random.default_rng(0).integers(0, 4, size=action.shape)
        assert count_invalid(uniform, mask) > 0
    assert worker.masks.invalid_actions == 0
    assert sum(env.illegal for env in envs.envs) == 0  # and the envs saw none either


class Scores(nn.Module):
    """Agent Q-values = the observation itself (observation width = actions)."""

    def __init__(self, n_agents: int, num_actions: int, state_dim: int = 0) -> None:
        super().__init__()
        self.n_agents, self.num_actions, self.state_dim = n_agents, num_actions, state_dim
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, observation):
        return observation * self.scale


def masked_batch(state_dim: int) -> TensorDict:
    # Next state: each agent's best action (3) is forbidden; the best allowed ones are 1 and 0.
    next_obs = torch.tensor([[[0.0, 2.0, 1.0, 9.0], [4.0, 1.0, 3.0, 8.0]]] * 2)
    next_mask = torch.tensor([[[True, True, True, False], [True, True, True, False]]] * 2)
    return TensorDict(
        {
            "observation": torch.tensor([[[1.0, 0.5, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0]]] * 2),
            "action": torch.tensor([[0, 1], [0, 1]]),
            "reward": torch.tensor([1.0, 0.5]),
            "next_observation": next_obs,
            "next_action_mask": next_mask,
            "terminated": torch.tensor([False, False]),
            "n_step_discount": torch.tensor([0.9, 0.5]),
            "state": torch.arange(2 * state_dim, dtype=torch.float32).view(2, state_dim),
            "next_state": torch.ones(2, state_dim),
        },
        batch_size=[2],
    )


@pytest.mark.parametrize("double_dqn", [True, False])
@pytest.mark.parametrize("mixer", ["none", "vdn", "qmix"])
def test_the_mixed_target_never_takes_a_masked_actions_q(mixer, double_dqn):
    torch.manual_seed(0)
    loss = MultiAgentQLoss(Scores(2, 4, state_dim=3), mixer=mixer, double_dqn=double_dqn)
    batch = masked_batch(3)
    q = torch.tensor([[1.0, 2.0]] * 2)  # the taken actions' Qs
    next_q = torch.tensor([[2.0, 4.0]] * 2)  # each agent's best allowed next Q, by hand
    reward, discount = batch["reward"], batch["n_step_discount"]
    with torch.no_grad():
        if mixer == "none":
            target = reward[:, None] + discount[:, None] * next_q
            expected = (q - target).pow(2).mean()
        else:
            target = reward + discount * loss.target_mixer(next_q, batch["next_state"])
            expected = (loss.mixer(q, batch["state"]) - target).pow(2).mean()
    got = loss(batch)["loss_q"]
    assert torch.allclose(got, expected), (got, expected)
    unmasked = loss(batch.exclude("next_action_mask"))["loss_q"]
    assert not torch.allclose(unmasked, expected)  # the forbidden 9 and 8 would be taken


def test_multi_agent_algorithms_take_the_mask_key_and_refuse_a_wrong_one():
    config = config_of("qmix", *MASKED)
    obs_space, action_space = env_spaces(config)
    assert obs_space["observation"].shape == (2, 5) and obs_space["state"].shape == (10,)
    spec = model_spec_for(config, (obs_space, action_space))
    assert (spec.n_agents, spec.num_actions, spec.obs_dim) == (2, 4, 5)
    cases = [
        ("iql", [*MASKED, "collector.env_kwargs={mask_size: 3}"], "collector.action_mask_key"),
        ("vdn", [f"collector.env_id={ENV}", "collector.env_kwargs={}"],
         "needs collector.action_mask_key"),  # a Dict observation with a mask, no key
        ("vdn", [*MASKED, "replay.frame_stack=4"], "replay.frame_stack"),
    ]  # fmt: skip
    for algorithm, overrides, named in cases:
        with pytest.raises(ConfigError, match=named):
            env_spaces(config_of(algorithm, *overrides))


class PrefersForbidden(nn.Module):
    """Scores forbidden actions 10, allowed ones their index + 1: greedy only under the mask."""

    def forward(self, x):
        allowed = x[..., :4]
        return (1.0 - allowed) * 10.0 + allowed * torch.arange(1.0, 5.0)


def test_load_policy_acts_evaluates_and_exports_under_per_agent_masks(tmp_path):
    config = config_of("vdn", *MASKED, "evaluation.num_envs=2")
    spaces = env_spaces(config)
    spec = model_spec_for(config, spaces)
    policy = Policy(AgentQNetwork(spec, q=PrefersForbidden()), spec, config, *spaces)
    mask = np.array([[0, 1, 0, 1], [1, 0, 0, 0]], np.int8)
    obs = np.concatenate([mask, np.zeros((2, 1))], -1).astype(np.float32)  # the env's view
    assert policy.act(obs).tolist() == [0, 1]  # unmasked: the first forbidden action
    assert policy.act(obs, mask=mask).tolist() == [3, 0]  # the best allowed ones
    assert policy.act({"observation": obs[None], KEY: mask[None]}).tolist() == [[3, 0]]
    batch, masks = np.stack([obs] * 6), np.stack([mask] * 6)
    sampled = policy.act(batch, deterministic=False, mask=masks)
    assert np.take_along_axis(masks, sampled[..., None], -1).all()
    with pytest.raises(ValueError, match="one mask per agent"):
        policy.act(obs, mask=np.ones(4, bool))
    # Greedy under the env's masks: every agent takes its highest allowed action (1 per step).
    played = evaluate_policy(policy, episodes=4)
    assert played["returns"] == [12.0] * 4  # 2 agents x 6 steps; a forbidden one pays -1
    from services.policy.export import export_policy

    written = export_policy(policy, "pt2", tmp_path / "policy.pt2")
    assert written["mask"] == {"name": "action_mask", "shape": ["batch", 2, 4], "dtype": "bool"}
    program = torch.export.load(str(tmp_path / "policy.pt2")).module()
    scores = program(torch.as_tensor(batch), torch.as_tensor(masks).bool())
    assert np.take_along_axis(masks, scores.argmax(-1).numpy()[..., None], -1).all()
