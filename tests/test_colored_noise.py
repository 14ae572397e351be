"""Colored exploration noise (collector.noise) in SAC's collector policy, and its config."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from collector.envs.vector import extra_for
from collector.networks.builders import NETWORKS, NetworkOptions, episode_steps
from collector.networks.squashed import SquashedGaussianSpec
from collector.noise import COLORS, ColoredNoise, colored_sequences
from services.config import ConfigError, load_config
from services.config.spec import model_spec_for


def lag_one(x: np.ndarray) -> float:
    return float(np.corrcoef(x[:-1], x[1:])[0, 1])


@pytest.mark.parametrize(("color", "low", "high"), [("white", -0.1, 0.1), ("pink", 0.6, 1.0)])
def test_sequences_have_unit_variance_and_the_color_s_correlation(color, low, high):
    rng = np.random.default_rng(0)
    sequences = colored_sequences(COLORS[color], 1000, (64,), rng)
    assert sequences.shape == (64, 1000) and sequences.dtype == np.float32
    assert np.allclose(sequences.std(axis=-1), 1.0, atol=1e-3)
    assert abs(float(sequences.mean())) < 0.2
    assert low < np.mean([lag_one(s) for s in sequences]) < high


def test_noise_hands_out_each_sequence_step_by_step_and_restores():
    noise = ColoredNoise(1.0, 50, np.random.SeedSequence(3))
    first = np.stack([noise.sample(3, 2) for _ in range(50)], axis=-1)
    assert np.array_equal(first, noise.buffer)  # one whole sequence per env and dimension
    state = noise.state_dict()
    ahead = [noise.sample(3, 2) for _ in range(70)]  # crosses into a third sequence
    noise.load_state_dict(state)
    assert all(np.array_equal(a, noise.sample(3, 2)) for a in ahead)
    assert not np.array_equal(noise.sample(4, 2)[:3], ahead[-1])  # a new shape: new sequences
    with pytest.raises(ValueError, match="beta"):
        ColoredNoise(-1.0, 10, np.random.SeedSequence(0))


def test_sac_collectors_explore_with_correlated_noise_inside_the_bounds():
    white = SquashedGaussianSpec(2, 1, (-1.0,), (1.0,), (16,))
    pink = SquashedGaussianSpec(2, 1, (-1.0,), (1.0,), (16,), noise_beta=1.0, noise_horizon=500)
    obs = np.zeros((4, 2), np.float32)
    torch.manual_seed(0)
    network = white.build()
    traces = {}
    for name, spec in (("white", white), ("pink", pink)):
        policy = spec.make_policy(network, np.random.SeedSequence(1))
        actions = np.stack([policy.act(obs, {})[0] for _ in range(500)])  # [500, 4, 1]
        assert actions.shape == (500, 4, 1) and np.abs(actions).max() <= 1.0
        traces[name] = np.mean([lag_one(actions[:, env, 0]) for env in range(4)])
        warmup = np.stack([policy.act(obs, {"random": True})[0] for _ in range(200)])
        assert np.abs(warmup).max() <= 1.0
        mode = policy.act(obs, {"deterministic": True})[0]
        assert np.allclose(mode, policy.act(obs, {"deterministic": True})[0])
    assert traces["white"] < 0.2 < 0.5 < traces["pink"]
    policy = pink.make_policy(network, np.random.SeedSequence(1))
    policy.act(obs, {})
    state = policy.state_dict()
    expected = policy.act(obs, {})[0]
    policy.load_state_dict(state)
    assert np.array_equal(policy.act(obs, {})[0], expected)


def test_the_config_names_the_color_and_the_builder_the_episode_length():
    config = load_config(
        overrides=[
            "algorithm=sac",
            "collector.env_id=MountainCarContinuous-v0",
            "collector.action_noise=pink",
        ]
    )
    spec = model_spec_for(config)
    assert (spec.noise_beta, spec.noise_horizon) == (1.0, 999)
    assert episode_steps("collector.atari:make_atari") == 1000  # a factory: no registry lookup
    options = NetworkOptions(env_id="Pendulum-v1", hidden_sizes=(8,))
    import gymnasium as gym

    default = NETWORKS["squashed"](
        options, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,))
    )
    assert default.noise_beta == 0.0
    with pytest.raises(ConfigError, match=r"^collector\.action_noise: must be one of"):
        load_config(overrides=["algorithm=sac", "collector.action_noise=blue"])
    with pytest.raises(ConfigError, match=r"^collector\.action_noise: colors .* dqn explores"):
        load_config(overrides=["algorithm=dqn", "collector.action_noise=pink"])
    cartpole = load_config(overrides=["algorithm=ppo", "collector.action_noise=pink"])
    with pytest.raises(ConfigError, match=r"^collector\.action_noise: .* CartPole-v1 has Discr"):
        model_spec_for(cartpole)
    ppo = load_config(
        overrides=[
            "algorithm=ppo",
            "collector.env_id=MountainCarContinuous-v0",
            "collector.action_noise=red",
        ]
    )
    assert (model_spec_for(ppo).noise_beta, model_spec_for(ppo).noise_horizon) == (2.0, 999)


def test_gaussian_actor_critics_sample_colored_noise_with_the_same_density():
    from collector.networks.actor_critic import ActorCriticSpec

    spec = ActorCriticSpec(3, 1, "gaussian", (8,), noise_beta=1.0, noise_horizon=400)
    torch.manual_seed(0)
    network = spec.build()
    policy = spec.make_policy(network, np.random.SeedSequence(2))
    obs = np.zeros((2, 3), np.float32)
    steps = [policy.act(obs, {}) for _ in range(400)]
    actions = np.stack([a for a, _ in steps])[:, :, 0]
    assert lag_one(actions[:, 0]) > 0.5  # white: about 0
    with torch.no_grad():
        mean, log_std = float(network(torch.zeros(1, 3))[0]), float(network.log_std)
    noise = (actions - mean) / np.exp(log_std)
    expected = -0.5 * noise**2 - log_std - 0.5 * np.log(2 * np.pi)
    log_prob = np.stack([extras["log_prob"] for _, extras in steps])
    assert np.allclose(log_prob, expected, atol=1e-4)
    with pytest.raises(ValueError, match="noise_beta"):
        ActorCriticSpec(3, 2, "categorical", noise_beta=1.0)
    state = policy.state_dict()
    ahead = policy.act(obs, {})[0]
    policy.load_state_dict(state)
    assert np.array_equal(policy.act(obs, {})[0], ahead)


def test_envs_of_an_extra_name_it():
    assert extra_for("LunarLander-v3") == "box2d"
    assert extra_for("Hopper-v5") == "mujoco"
    assert extra_for("CartPole-v1") is None
    assert extra_for("collector.atari:make_atari") is None
    assert extra_for("NoSuchEnv-v0") is None
