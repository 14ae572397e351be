"""The network spec a run's env and algorithm call for."""

from __future__ import annotations

import gymnasium as gym

from services import multiagent
from services.algorithms import AlgorithmConfigError, algorithm_for, check_spaces, spec_for
from services.config import ConfigError, RunConfig

Spaces = tuple[gym.Space, gym.Space]


def env_spaces(config: RunConfig) -> Spaces:
    """The env's observation and action spaces, checked against the algorithm (no torch).

    Raises:
        ConfigError: If the env id is unknown or its spaces do not suit the algorithm.
    """
    env_id = config.collector.env_id
    if algorithm_for(config).multi_agent:  # the PettingZoo wrapper's Dict and MultiDiscrete
        try:
            return multiagent.env_spaces(config)
        except multiagent.MultiAgentConfigError as err:
            raise ConfigError(str(err)) from None
    try:
        env = gym.make(env_id, **config.collector.env_kwargs)
    except gym.error.Error as err:
        raise ConfigError(f"collector.env_id: cannot make {env_id!r}: {err}") from None
    try:
        spaces = env.observation_space, env.action_space
    finally:
        env.close()
    try:
        check_spaces(config, *spaces)
    except AlgorithmConfigError as err:
        raise ConfigError(str(err)) from None
    return spaces


def model_spec_for(config: RunConfig, spaces: Spaces | None = None):
    """The algorithm's model spec for the env (spaces read with :func:`env_spaces` if omitted).

    Returns:
        A ``ModelSpec`` (DQN), ``ActorCriticSpec`` (PPO, A2C, REINFORCE) or
        ``SquashedGaussianSpec`` (SAC).

    Raises:
        ConfigError: If the env id is unknown or its spaces do not suit the algorithm.
    """
    obs_space, action_space = spaces or env_spaces(config)
    try:
        return spec_for(config, obs_space, action_space)
    except AlgorithmConfigError as err:
        raise ConfigError(str(err)) from None
