"""The registries an algorithm is made of: recipes name networks and losses that exist (no Ray)."""

import gymnasium as gym
import numpy as np
import pytest

from collector.networks.builders import NETWORKS, NetworkOptions, is_agent_spaces, is_pixels
from learner.config import LearnerConfig
from learner.losses import LOSSES, loss_factory_for
from services.config.recipes import ALGORITHMS

FLAT = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
OPTIONS = NetworkOptions(env_id="Test-v0", hidden_sizes=(8,))


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_recipe_names_a_registered_network_and_loss(name):
    recipe = ALGORITHMS[name]
    assert recipe.network in NETWORKS
    assert recipe.pixel_network is None or recipe.pixel_network in NETWORKS
    assert recipe.loss in LOSSES
    assert callable(loss_factory_for(LearnerConfig(loss=recipe.loss)))


def test_a_recipe_picks_its_pixel_network_only_for_frames():
    dqn, sac = ALGORITHMS["dqn"], ALGORITHMS["sac"]
    assert (dqn.network_for(FLAT), dqn.network_for(FRAMES)) == ("q_mlp", "cnn_q")
    assert sac.network_for(FRAMES) == "squashed"
    assert is_pixels(FRAMES) and not is_pixels(FLAT)


def test_the_auto_stepper_is_the_loss_registry_s():
    assert LearnerConfig(loss="sac").resolved_stepper == "multi_optimizer"
    assert LearnerConfig(loss="dqn").resolved_stepper == "default"
    assert LearnerConfig(loss="dqn", precision="bf16").resolved_stepper == "mixed_precision"


def test_builders_read_their_options_and_the_spaces():
    continuous = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    actor = NETWORKS["actor_critic"](OPTIONS, FLAT, continuous)
    assert (actor.obs_dim, actor.action_dim, actor.distribution) == (3, 1, "gaussian")
    squashed = NETWORKS["squashed"](OPTIONS, FLAT, continuous)
    assert (squashed.action_low, squashed.action_high, squashed.hidden_sizes) == (
        (-2.0,),
        (2.0,),
        (8,),
    )
    q = NETWORKS["cnn_q"](
        NetworkOptions("Pong", pixel_torso="impala"), FRAMES, gym.spaces.Discrete(6)
    )
    assert (q.frame_stack, q.num_actions, q.torso) == (4, 6, "impala")


def test_the_agent_network_reads_the_wrapper_s_spaces():
    obs = gym.spaces.Dict(
        {
            "observation": gym.spaces.Box(-1.0, 1.0, (3, 7), np.float32),
            "state": gym.spaces.Box(-1.0, 1.0, (10,), np.float32),
        }
    )
    actions = gym.spaces.MultiDiscrete([5, 5, 5])
    assert is_agent_spaces(obs, actions)
    spec = NETWORKS["agents"](NetworkOptions("spread", prev_action=True), obs, actions)
    assert (spec.n_agents, spec.obs_dim, spec.num_actions, spec.state_dim) == (3, 2, 5, 10)


@pytest.mark.parametrize("network", ["q_mlp", "actor_critic", "squashed", "agents"])
def test_a_builder_refuses_spaces_it_cannot_serve_naming_the_env(network):
    with pytest.raises(ValueError, match=r"^collector\.env_id: .*Test-v0"):
        NETWORKS[network](OPTIONS, FRAMES, gym.spaces.Discrete(2))


def test_the_pixel_actor_critic_starts_as_cleanrl_s_ppo_atari():
    # Orthogonal weights (gain sqrt 2 in the Nature torso, 0.01 policy, 1 value): with torch's
    # default init the features were ~30x smaller and PPO on Pong barely moved its policy.
    import math

    import torch

    from collector.networks.cnn import PixelActorCriticSpec

    torch.manual_seed(0)
    network = PixelActorCriticSpec(4, 84, 84, 6).build()
    layers = [
        m for m in network.torso.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)
    ]
    heads = [(network.policy_head, 0.01), (network.value_head, 1.0)]
    for layer, gain in [*((layer, math.sqrt(2)) for layer in layers), *heads]:
        weight = layer.weight.detach().flatten(1)
        rows = min(weight.shape)
        gram = weight @ weight.T if weight.shape[0] <= weight.shape[1] else weight.T @ weight
        assert torch.allclose(gram, gain**2 * torch.eye(rows), atol=1e-4 * max(gain**2, 1))
        assert not layer.bias.detach().any()
    frames = torch.randint(0, 256, (32, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        logits, _ = network(frames)
        features = network.torso(frames)
    assert features.std() > 0.1  # torch's default init: about 0.014
    assert logits.abs().max() < 0.1  # a near-uniform policy to start
