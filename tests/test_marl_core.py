"""Multi-agent cores without Ray: mixers, the IQL/VDN/QMIX loss, the env wrapper, refusals."""

import subprocess

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from collector.envs.multiagent import ParallelVectorEnv
from collector.networks.agents import AgentQSpec
from collector.rollout import RolloutWorker
from learner.core import LearnerCore
from learner.losses.marl import MultiAgentQLoss
from learner.losses.mixers import QMixer, VDNMixer
from services.config import ConfigError, load_config
from services.config.spec import env_spaces, model_spec_for
from tests.conftest import PYTHON, ROOT, cli_env

SPREAD = "mpe2.simple_spread_v3:parallel_env"
CONFIGS = ROOT / "deploy" / "configs"


def test_qmix_is_monotonic_in_every_agent_q():
    torch.manual_seed(0)
    mixer = QMixer(4, 10, embed_dim=16, hypernet_hidden=32)
    with torch.no_grad():  # large, mixed-sign hypernetwork weights: abs() must still hold
        for p in mixer.parameters():
            p.mul_(5.0)
    q = (torch.randn(512, 4) * 10).requires_grad_(True)
    state = torch.randn(512, 10) * 3
    q_tot = mixer(q, state)
    assert q_tot.shape == (512,)
    (grad,) = torch.autograd.grad(q_tot.sum(), q)
    assert (grad >= 0).all()
    assert (grad > 0).any(dim=0).all()  # every agent moves Q_tot somewhere
    # Raising any one agent's Q never lowers the team value.
    for agent in range(4):
        bumped = q.detach().clone()
        bumped[:, agent] += 1.0
        assert (mixer(bumped, state) >= mixer(q.detach(), state) - 1e-5).all()


def test_vdn_mix_is_the_sum():
    q = torch.tensor([[1.0, -2.0, 0.5], [3.0, 4.0, -1.0]])
    assert torch.equal(VDNMixer()(q), torch.tensor([-0.5, 6.0]))


class ScaledAgents(nn.Module):
    """Agent Q-values = observation * per-action scale (observation width = actions)."""

    def __init__(self, n_agents: int, num_actions: int, state_dim: int = 0) -> None:
        super().__init__()
        self.n_agents, self.num_actions, self.state_dim = n_agents, num_actions, state_dim
        self.scale = nn.Parameter(torch.ones(num_actions))

    def forward(self, observation):
        return observation * self.scale


def two_agent_batch():
    # Item 0 continues (reward 1, discount 0.9); item 1 terminates (reward -1): no bootstrap.
    return TensorDict(
        {
            "observation": torch.tensor([[[1.0, 2.0], [3.0, 0.0]], [[0.0, 1.0], [2.0, 2.0]]]),
            "action": torch.tensor([[1, 0], [0, 1]]),
            "reward": torch.tensor([1.0, -1.0]),
            "next_observation": torch.tensor([[[0.5, 4.0], [1.0, 2.0]], [[9.0, 9.0], [9.0, 9.0]]]),
            "terminated": torch.tensor([False, True]),
            "n_step_discount": torch.tensor([0.9, 0.9]),
        },
        batch_size=[2],
    )


def test_vdn_target_of_a_hand_computed_two_agent_transition():
    loss = MultiAgentQLoss(ScaledAgents(2, 2), mixer="vdn")
    out = loss(two_agent_batch())
    # Item 0: Q_tot = 2 + 3 = 5; next greedy actions (1, 1): 4 + 2 = 6; target 1 + 0.9 * 6 = 6.4.
    # Item 1: Q_tot = 0 + 2 = 2; terminated, so the target is the reward, -1.
    torch.testing.assert_close(out["td_error"], torch.tensor([1.4, -3.0]))
    torch.testing.assert_close(out["loss_q"], torch.tensor((1.4**2 + 3.0**2) / 2))


def test_iql_targets_are_per_agent_on_the_team_reward():
    out = MultiAgentQLoss(ScaledAgents(2, 2), mixer="none")(two_agent_batch())
    # Targets: item 0 agents 1 + 0.9 * 4 = 4.6 and 1 + 0.9 * 2 = 2.8; item 1 both -1.
    errors = torch.tensor([[4.6 - 2.0, 2.8 - 3.0], [-1.0 - 0.0, -1.0 - 2.0]])
    torch.testing.assert_close(out["loss_q"], errors.pow(2).mean())
    torch.testing.assert_close(out["td_error"], errors.abs().mean(dim=1))


def test_double_q_selects_with_the_online_network_and_evaluates_with_the_target():
    batch = two_agent_batch()[:1]
    for double, next_q in ((True, -4.0 + -2.0), (False, 0.5 + 1.0)):
        loss = MultiAgentQLoss(ScaledAgents(2, 2), mixer="vdn", double_dqn=double)
        with torch.no_grad():
            loss.target_agent_network.scale.copy_(torch.tensor([1.0, -1.0]))
        out = loss(batch)
        torch.testing.assert_close(out["td_error"], torch.tensor([1.0 + 0.9 * next_q - 5.0]))


def test_qmix_target_with_termination_is_the_reward_and_targets_track_the_online_nets():
    torch.manual_seed(1)
    agents = ScaledAgents(2, 2, state_dim=3)
    loss = MultiAgentQLoss(agents, mixer="qmix", embed_dim=4, hypernet_hidden=8)
    batch = two_agent_batch()
    batch["state"] = torch.randn(2, 3)
    batch["next_state"] = torch.randn(2, 3)
    out = loss(batch)
    q_tot = loss.mixer(torch.tensor([[0.0, 2.0]]), batch["state"][1:])
    torch.testing.assert_close(out["td_error"][1], -1.0 - q_tot[0].detach())
    with torch.no_grad():
        loss.mixer.hyper_b1.bias.add_(1.0)
    loss.update_target(0.5)  # soft: halfway
    torch.testing.assert_close(
        loss.target_mixer.hyper_b1.bias, loss.mixer.hyper_b1.bias - 0.5, rtol=0, atol=1e-6
    )
    loss.update_target(1.0)  # hard: equal
    assert torch.equal(loss.target_mixer.hyper_b1.bias, loss.mixer.hyper_b1.bias)


def test_wrapper_stacks_agents_resets_next_step_and_appends_previous_actions():
    kwargs = {"N": 3, "max_cycles": 3, "continuous_actions": False}
    envs = ParallelVectorEnv.from_factory(SPREAD, 2, env_kwargs=kwargs, prev_action=True)
    obs, _ = envs.reset(seed=[1, 2])
    assert obs["observation"].shape == (2, 3, 18 + 5) and obs["state"].shape == (2, 54)
    assert not obs["observation"][..., 18:].any()  # no previous action after a reset
    actions = np.array([[0, 1, 2], [3, 4, 0]])
    dones = []
    for _ in range(3):
        obs, reward, terminated, truncated, info = envs.step(actions)
        dones.append(truncated.copy())
        assert reward.shape == (2,) and info["agent_reward"].shape == (2, 3)
        np.testing.assert_allclose(reward, info["agent_reward"].sum(axis=1), rtol=1e-6)
        assert not terminated.any()
    assert [d.tolist() for d in dones] == [[False, False], [False, False], [True, True]]
    np.testing.assert_array_equal(obs["observation"][..., 18:].argmax(-1), actions)
    obs, reward, terminated, truncated, _ = envs.step(actions)  # the auto-reset step
    assert not (terminated | truncated).any() and not reward.any()
    assert not obs["observation"][..., 18:].any()
    envs.close()


def test_rollout_keeps_the_agent_dimension_through_n_step_windows():
    spec = AgentQSpec(obs_dim=18, n_agents=3, num_actions=5, state_dim=54)
    kwargs = {"N": 3, "max_cycles": 5, "continuous_actions": False}
    envs = spec.make_vector_env(SPREAD, 2, env_kwargs=kwargs)
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    worker = RolloutWorker(envs, policy, [3, 4], n_step=3, gamma=0.5)
    batch = worker.rollout(12, {"epsilon": 0.5}, policy_version=7)
    t = batch.transitions
    n = batch.frames
    assert t["observation"].shape == t["next_observation"].shape == (n, 3, 18)
    assert t["state"].shape == t["next_state"].shape == (n, 54)
    assert t["action"].shape == (n, 3) and t["reward"].shape == (n,)
    # 12 steps of 2 envs (episodes of 5, then an auto-reset step): windows start at steps 0-9
    # (10 and 11 wait for the next rollout), except at the auto-reset step 5.
    assert n == 2 * (10 - 1)
    assert sorted(set(t["n_step_discount"].tolist())) == [0.125, 0.25, 0.5]  # cut at episode ends
    assert batch.episode_lengths == [5, 5, 5, 5]
    # The state of a window's start is the agents' observations' env state (all agents).
    np.testing.assert_allclose(t["state"][:, :18], t["observation"][:, 0])


def test_learner_core_trains_the_shared_network_from_sampled_arrays():
    config = load_config(CONFIGS / "spread_qmix.yaml", ["learner.marl.prev_action=true"])
    spec = model_spec_for(config)
    assert (spec.n_agents, spec.num_actions, spec.state_dim, spec.input_dim) == (3, 5, 54, 23)
    rng = np.random.default_rng(0)
    arrays = {
        "observation": rng.normal(size=(64, 3, 23)).astype(np.float32),
        "next_observation": rng.normal(size=(64, 3, 23)).astype(np.float32),
        "state": rng.normal(size=(64, 54)).astype(np.float32),
        "next_state": rng.normal(size=(64, 54)).astype(np.float32),
        "action": rng.integers(0, 5, size=(64, 3)),
        "reward": rng.normal(size=64).astype(np.float32),
        "terminated": np.zeros(64, bool),
        "n_step_discount": np.full(64, 0.99, np.float32),
    }
    core = LearnerCore(spec, config.learner)
    before = {k: v.clone() for k, v in core.weights().items()}
    metrics = core.train([core.to_batch(arrays)] * 3)
    assert core.version == 3 and torch.isfinite(metrics["loss_q"])
    after = core.weights()
    assert set(after) == set(before) and any(not torch.equal(after[k], before[k]) for k in after)


def refused(*overrides, config="spread_qmix.yaml"):
    with pytest.raises(ConfigError) as err:
        env_spaces(load_config(CONFIGS / config, list(overrides)))
    return str(err.value)


def test_refusals_name_the_field():
    message = refused(
        "collector.env_id=gymnasium.envs.classic_control.cartpole:CartPoleEnv",
        "collector.env_kwargs={}",
    )
    assert message.startswith("collector.env_id:") and "ParallelEnv" in message
    message = refused(
        "collector.env_id=mpe2.simple_speaker_listener_v4:parallel_env", "collector.env_kwargs={}"
    )
    assert message.startswith("collector.env_id:") and "same action space" in message
    message = refused("collector.global_state=none")
    assert message.startswith("collector.global_state:") and "qmix" in message
    message = refused("learner.marl.mixer=vdn")
    assert message.startswith("learner.marl.mixer:")
    message = refused("grpc.port=0")
    assert message.startswith("grpc.port:") and "single-agent" in message
    message = refused("collector.vector_mode=async")
    assert message.startswith("collector.vector_mode:")
    message = refused("collector.env_id=CartPole-v1")
    assert message.startswith("collector.env_id:") and "module:function" in message
    # IQL and VDN need no state; QMIX with the concatenated observations does not need state().
    assert load_config(CONFIGS / "spread_vdn.yaml", ["collector.global_state=none"])
    spaces = env_spaces(
        load_config(CONFIGS / "spread_qmix.yaml", ["collector.global_state=observations"])
    )
    assert spaces[0]["state"].shape == (54,)


def test_missing_marl_extra_is_refused_naming_it():
    script = (
        "import sys; sys.modules['pettingzoo'] = None\n"
        "from services.train import main\n"
        "sys.exit(main(['--config', 'deploy/configs/spread_vdn.yaml']))\n"
    )
    result = subprocess.run(
        [PYTHON, "-c", script], cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert 'pip install "relayrl[marl]"' in result.stderr
    assert "algorithm: vdn needs the marl extra" in result.stderr
