"""The network spec a run's env calls for."""

from __future__ import annotations

import gymnasium as gym

from collector.policy import ModelSpec
from services.config import ConfigError, RunConfig


def model_spec_for(config: RunConfig) -> ModelSpec:
    """Reads the env's spaces and returns the Q-network spec.

    Raises:
        ConfigError: If the env id is unknown or its spaces do not suit DQN.
    """
    env_id = config.collector.env_id
    try:
        env = gym.make(env_id)
    except gym.error.Error as err:
        raise ConfigError(f"collector.env_id: cannot make {env_id!r}: {err}") from None
    try:
        obs_space, action_space = env.observation_space, env.action_space
    finally:
        env.close()
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ConfigError(
            f"collector.env_id: DQN needs a discrete action space, {env_id} has {action_space}"
        )
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise ConfigError(
            f"collector.env_id: the MLP Q-network needs a flat Box observation, "
            f"{env_id} has {obs_space}"
        )
    return ModelSpec(int(obs_space.shape[0]), int(action_space.n), config.learner.hidden_sizes)
