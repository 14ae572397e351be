"""The network spec a run's env and algorithm call for."""

from __future__ import annotations

import gymnasium as gym

from services.algorithms import AlgorithmConfigError, spec_for
from services.config import ConfigError, RunConfig


def model_spec_for(config: RunConfig):
    """Reads the env's spaces and returns the algorithm's model spec.

    Returns:
        A ``ModelSpec`` (DQN), ``ActorCriticSpec`` (PPO, A2C, REINFORCE) or
        ``SquashedGaussianSpec`` (SAC).

    Raises:
        ConfigError: If the env id is unknown or its spaces do not suit the algorithm.
    """
    env_id = config.collector.env_id
    try:
        env = gym.make(env_id, **config.collector.env_kwargs)
    except gym.error.Error as err:
        raise ConfigError(f"collector.env_id: cannot make {env_id!r}: {err}") from None
    try:
        obs_space, action_space = env.observation_space, env.action_space
    finally:
        env.close()
    try:
        return spec_for(config, obs_space, action_space)
    except AlgorithmConfigError as err:
        raise ConfigError(str(err)) from None
