"""Users' recurrent networks: the state protocol's probe, their policies, loading and export.

The good networks are docs/networks.md's worked examples (``tests.network_examples``); the bad
ones below each break one rule of the protocol. PPO and DQN are marked recurrent for these tests
only, until their registrations say so.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from collector.networks.contracts import probe
from services.config import ConfigError, load_config
from services.config.spec import env_spaces, model_spec_for
from services.policy import load_policy
from services.policy.export import export_policy
from tests import network_examples
from tests.test_policy import write_checkpoint

EXAMPLES = "tests.network_examples"
STATELESS = "collector.env_id=relayrl:StatelessCartPole-v1"
BOX, TWO = gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2)


def config_for(algorithm, factory, recurrent="gru"):
    overrides = [f"algorithm={algorithm}", STATELESS, f"learner.network={EXAMPLES}:{factory}"]
    overrides += ["learner.recurrent_hidden_size=8", "learner.hidden_sizes=[8]"]
    return load_config(None, [*overrides, f"learner.recurrent={recurrent}"])


@pytest.mark.parametrize(
    ("algorithm", "factory", "family"),
    [
        ("r2d2", "lstm_q_network", "recurrent_q"),
        ("ppo", "gru_cell_actor_critic", "recurrent_actor_critic"),
    ],
)
def test_the_documented_networks_pass_the_probe_and_act_with_a_state(algorithm, factory, family):
    config = config_for(algorithm, factory)
    spec = model_spec_for(config, env_spaces(config))  # probed: refused otherwise
    assert spec.family == family and spec.name.endswith(factory)
    network = spec.build()
    policy = spec.make_policy(network, np.random.SeedSequence(0))
    obs = np.random.default_rng(0).normal(size=(4, 3, 2)).astype(np.float32)  # [T, B, 2]
    state = policy.initial_state(3)
    for t in range(4):
        actions, extras, state = policy.act(obs[t], {"deterministic": True}, state=state)
        assert actions.shape == (3,)
    with torch.no_grad():
        *_, whole = network(torch.from_numpy(obs).transpose(0, 1), network.initial_state(3))
    np.testing.assert_allclose(state, whole.numpy(), atol=1e-6)
    if family == "recurrent_actor_critic":  # sampling from the user's distribution
        _, extras, _ = policy.act(obs[0], {}, state=state)
        assert extras["log_prob"].shape == (3,) and (extras["log_prob"] <= 0).all()


def test_a_users_recurrent_policy_loads_and_exports_with_its_state(tmp_path):
    root = tmp_path / "run" / "checkpoints"
    overrides = [
        "algorithm=ppo",
        STATELESS,
        f"learner.network={EXAMPLES}:gru_cell_actor_critic",
        "learner.recurrent=gru",
        "learner.recurrent_hidden_size=8",
    ]
    write_checkpoint(root, None, overrides)
    policy = load_policy(root.parent, allow_modules=["tests"])
    assert policy.recurrent and policy.initial_state().shape == (8,)
    action, state = policy.act(np.ones(2, np.float32), state=policy.initial_state())
    written = export_policy(policy, "pt2", tmp_path / "gru.pt2")  # checked against forward
    assert written["state"]["shape"] == ["batch", 8]
    program = torch.export.load(written["out"]).module()
    logits, next_state = program(torch.ones(1, 2), torch.zeros(1, 8))
    assert logits.argmax(-1).item() == action
    np.testing.assert_allclose(next_state[0].detach().numpy(), state, atol=1e-5)


class NoState(nn.Module):
    """Takes a state but has no initial_state."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(2, 2)

    def forward(self, obs, state, reset=None, valid=None):
        return self.q(obs), state


class LastStepOnly(network_examples.LSTMQNetwork):
    """Q-values of the last step only: [B, n_actions] instead of [B, T, n_actions]."""

    def forward(self, observation, state, reset=None, valid=None):
        q, state = super().forward(observation, state, reset, valid)
        return q[:, -1], state


class IgnoresReset(network_examples.LSTMQNetwork):
    def forward(self, observation, state, reset=None, valid=None):
        return super().forward(observation, state, None, valid)


class IgnoresPadding(network_examples.LSTMQNetwork):
    def forward(self, observation, state, reset=None, valid=None):
        return super().forward(observation, state, reset, None)


class NonZeroStart(network_examples.LSTMQNetwork):
    def initial_state(self, batch):
        return torch.ones(batch, 16)


class Feedforward(NoState):
    """A feed-forward Q-network that still defines initial_state."""

    def forward(self, obs):
        return self.q(obs)

    def initial_state(self, batch):
        return torch.zeros(batch, 4)


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (NoState(), r"needs initial_state\(batch\)"),
        (
            LastStepOnly(2, 2, 8),
            r"gives q \[2, 2\] for sequences \[2, 3, 2\]; needs \[2, 3, \.\.\.\]",
        ),
        (IgnoresReset(2, 2, 8), "reset must zero the state before the step"),
        (IgnoresPadding(2, 2, 8), "a padded step .valid False. moves the state"),
        (NonZeroStart(2, 2, 8), r"initial_state\(2\) must be float32 zeros"),
    ],
)
def test_a_recurrent_network_breaking_the_protocol_is_refused_naming_the_field(module, message):
    with pytest.raises(ValueError, match=rf"^learner.network: mine:net.*{message}"):
        probe("recurrent_q", module, BOX, TWO, name="mine:net", algorithm="r2d2")


def test_a_recurrent_module_without_learner_recurrent_is_refused_naming_it():
    with pytest.raises(ValueError, match="has initial_state.*set learner.recurrent"):
        probe("q", Feedforward(), BOX, TWO, name="mine:net", algorithm="dqn")


def test_the_config_refuses_a_users_network_with_wrong_shapes():
    # the feed-forward example under learner.recurrent: called with a state it does not take
    config = config_for("r2d2", "residual_q_network", recurrent="lstm")
    with pytest.raises(ConfigError, match=r"learner.network: tests.network_examples:residual_q"):
        model_spec_for(config, env_spaces(config))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_built_in_recurrent_networks_keep_the_protocol(kind):
    from collector.envs.spaces import describe
    from collector.networks.recurrent import RecurrentActorCriticSpec, RecurrentQSpec

    layout, box_actions = describe(BOX), gym.spaces.Box(-1, 1, (3,), np.float32)
    common = {"recurrent": kind, "recurrent_hidden_size": 8, "hidden_sizes": (8,)}
    probe("recurrent_q", RecurrentQSpec(layout, num_actions=2, **common).build(), BOX, TWO)
    gaussian = RecurrentActorCriticSpec(layout, action_dim=3, distribution="gaussian", **common)
    probe("recurrent_actor_critic", gaussian.build(), BOX, box_actions)
