"""learner.network: the documented examples fit their families; wrong shapes are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from collector.networks.custom import CustomNetworkSpec, DistributionActor
from services import train
from services.config import ConfigError, load_config
from services.config.spec import model_spec_for
from tests.conftest import ROOT

CONFIGS = ROOT / "deploy" / "configs"
HERE = "tests.test_network_contracts"
EXAMPLES = "tests.network_examples"
SPREAD = CONFIGS / "spread_qmix.yaml"


# -- factories with the wrong shapes (importable by name) ----------------------------------------
def wrong_q(observation_space, action_space, config):
    return nn.Linear(observation_space.shape[0], int(action_space.n) + 1)


class ScalarValue(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, observation):
        out = self.linear(observation)
        return out[:, :2], out[:, 2:]  # value [B, 1] instead of [B]

    def distribution(self, logits):
        return torch.distributions.Categorical(logits=logits)


def wrong_value(observation_space, action_space, config):
    return ScalarValue()


def not_a_module(observation_space, action_space, config):
    return "a network"


class OneOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, observation):
        return self.linear(observation)


def wrong_sac(observation_space, action_space, config):
    return OneOutput()


def wrong_agents(observation_space, action_space, config):
    width = observation_space["observation"].shape[-1]
    return nn.Linear(width, int(action_space.nvec[0]))  # forgets the agent id's n_agents inputs


@pytest.mark.parametrize(
    ("config_file", "factory", "message"),
    [
        (None, "wrong_q", r"maps observations \[2, 4\] to \[2, 3\]; dqn needs Q-values \[2, 2\]"),
        (CONFIGS / "cartpole_ppo.yaml", "wrong_value", r"values of shape \[2, 1\].*needs \[2\]"),
        (None, "not_a_module", "returned a str, not a torch.nn.Module"),
        (CONFIGS / "pendulum_sac.yaml", "wrong_sac", r"needs a pair of tensors \(mean, log_std\)"),
        (SPREAD, "wrong_agents", r"fails on a batch of observations \[2, 3, 18\]"),
        (None, "no_such_factory", "has no attribute 'no_such_factory'"),
    ],
)
def test_a_network_with_wrong_shapes_is_refused_naming_the_field(config_file, factory, message):
    config = load_config(config_file, [f"learner.network={HERE}:{factory}"])
    with pytest.raises(ConfigError, match=message) as refused:
        model_spec_for(config)
    assert str(refused.value).startswith("learner.network: ")


def test_the_cli_refuses_it_before_ray_starts(tmp_path, capsys):
    # The CLI's main in this process: a unit test, failed by its guard if Ray starts.
    assert (
        train.main(["--set", f"learner.network={HERE}:wrong_q", "--set", f"run.dir={tmp_path}"])
        == 2
    )
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "learner.network: tests.test_network_contracts:wrong_q" in lines[0]
    assert "[2, 3]" in lines[0] and "Ray" not in err + out
    assert not any(tmp_path.iterdir())


def test_a_malformed_path_and_torchrl_ppo_are_refused():
    with pytest.raises(ConfigError, match="learner.network: must be a 'module:function'"):
        load_config(overrides=["learner.network=not a path"])
    with pytest.raises(ConfigError, match="learner.network: a user network trains with"):
        load_config(
            CONFIGS / "cartpole_ppo_torchrl.yaml",
            [f"learner.network={EXAMPLES}:shared_torso_actor_critic"],
        )


@pytest.mark.parametrize(
    ("config_file", "factory", "overrides"),
    [
        (None, "residual_q_network", []),
        (CONFIGS / "cartpole_ppo.yaml", "shared_torso_actor_critic", []),
        (CONFIGS / "pendulum_sac.yaml", "sac_actor", []),
        (SPREAD, "agent_q_network", ["learner.marl.prev_action=true"]),
    ],
)
def test_the_documented_examples_fit_their_family(config_file, factory, overrides):
    config = load_config(config_file, [f"learner.network={EXAMPLES}:{factory}", *overrides])
    spec = model_spec_for(config)
    assert isinstance(spec, CustomNetworkSpec) and spec.name.endswith(factory)
    network = spec.build()
    policy = spec.make_policy(network, np.random.SeedSequence(0))
    space = spec.observation_space
    obs = space.sample() if spec.family != "agents" else space.sample()["observation"]
    obs = np.stack([obs, obs]).astype(np.float32)
    actions, extras = policy.act(obs if spec.family != "agents" else {"observation": obs}, {})
    assert len(actions) == 2
    if spec.family == "actor_critic":  # sampled from the user's distribution, with extras
        assert isinstance(policy, DistributionActor)
        assert sorted(extras) == ["log_prob", "value"] and extras["log_prob"].shape == (2,)
        np.testing.assert_allclose(policy.value(obs), extras["value"], rtol=1e-6)
    if spec.family == "squashed":  # the twin critics come from the actor's make_critic()
        from learner.losses.sac import sac_loss

        loss = sac_loss(network, config.learner)
        assert type(loss.q1).__name__ == "Critic" and loss.q1 is not loss.q2
        assert (np.abs(actions) <= 2.0).all()  # in Pendulum's bounds
