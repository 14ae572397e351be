"""The env's spaces and the network spec a run's env and algorithm call for.

The recipe names the network (``Algorithm.network``, or ``pixel_network`` over frames);
:func:`network_options` fills the builders' :class:`~collector.networks.builders.NetworkOptions`
from the config, and :func:`model_spec_for` calls the builder of ``collector.networks.builders``
after the recipe's checks, turning every refusal into :class:`ConfigError`. With
``learner.network`` the user's factory stands in for the built network
(:func:`user_network_spec`): resolved, built once and probed on a dummy batch, so a wrong shape
is refused before any actor starts.
"""

from __future__ import annotations

import os

import gymnasium as gym

from collector.envs.images import parse as parse_images
from collector.envs.spaces import observation_space
from collector.envs.vector import make_env, missing_extra_hint
from collector.networks.builders import NETWORKS, NetworkOptions
from collector.networks.twins import recurrent_network
from services.config import multiagent
from services.config.actions import masked_observation_space
from services.config.checks import check_spaces
from services.config.recipes import AlgorithmConfigError, algorithm_for
from services.config.sections import ConfigError, RunConfig

Spaces = tuple[gym.Space, gym.Space]


def env_spaces(config: RunConfig) -> Spaces:
    """The env's observation and action spaces, checked against the algorithm (no torch).

    With ``collector.action_mask_key`` the observation space is the networks' (without the mask).

    Raises:
        ConfigError: If the env id is unknown or its spaces do not suit the algorithm.
    """
    env_id = config.collector.env_id
    if algorithm_for(config).multi_agent:  # the PettingZoo wrapper's Dict and MultiDiscrete
        if config.collector.image_keys:
            raise ConfigError(
                f"collector.image_keys: preprocesses keys of a single-agent Dict observation; "
                f"{config.algorithm} is multi-agent, got {sorted(config.collector.image_keys)}"
            )
        try:
            spaces = multiagent.env_spaces(config)
            # per-agent masks (collector.action_mask_key) are not in the wrapper's spaces
            masked_observation_space(config, *spaces)
        except (multiagent.MultiAgentConfigError, AlgorithmConfigError) as err:
            raise ConfigError(str(err)) from None
        return spaces
    try:
        # module:function as the collectors build it; an id's extra package (MiniGrid) first
        env = make_env(env_id, **config.collector.env_kwargs)
    except gym.error.DependencyNotInstalled as err:  # box2d, mujoco: name relayrl's extra
        hint = missing_extra_hint(env_id) or str(err)
        raise ConfigError(f"collector.env_id: {env_id!r}: {hint}") from None
    except (gym.error.Error, ValueError, TypeError) as err:
        raise ConfigError(f"collector.env_id: cannot make {env_id!r}: {err}") from None
    except ImportError as err:  # an env needing an optional extra says which (collector.atari)
        raise ConfigError(f"collector.env_id: {env_id!r}: {err}") from None
    try:
        spaces = env.observation_space, env.action_space
    finally:
        env.close()
    try:
        # as collectors see it: the mask (collector.action_mask_key) out of the observation
        # (collector.envs.masks), then a Dict/Tuple observation flattened by key path
        spaces = masked_observation_space(config, *spaces), spaces[1]
        keys = config.collector.observation_keys
        images = parse_images(config.collector.image_keys)  # collector.envs.images
        spaces = observation_space(spaces[0], keys, env_id=env_id, images=images), spaces[1]
        check_spaces(config, *spaces)
    except ValueError as err:  # AlgorithmConfigError, or a space no encoder takes
        raise ConfigError(str(err)) from None
    return spaces


def check_local_gpus(config: RunConfig, *, cuda_available: bool | None = None) -> None:
    """Refuses GPU learners on an embedded local Ray when this host has no CUDA device.

    With ``RAY_ADDRESS`` set, the cluster's GPU nodes are Ray's to find (placement waits for
    them and reports what is missing), so nothing is checked here.

    Args:
        config: The run's config.
        cuda_available: Whether CUDA is usable here (default: ask torch).

    Raises:
        ConfigError: Naming ``learner.resources_per_rank``.
    """
    if not config.learner.uses_gpu or os.environ.get("RAY_ADDRESS"):
        return
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    if not cuda_available:
        raise ConfigError(
            f"learner.resources_per_rank: asks for a GPU per rank "
            f"({config.learner.resources_per_rank}) but this host has no CUDA device and no "
            "RAY_ADDRESS names a cluster with GPU nodes; drop the GPU entry to learn on CPUs"
        )


def network_options(config: RunConfig) -> NetworkOptions:
    """What the network builders read from the run's config."""
    return NetworkOptions(
        env_id=config.collector.env_id,
        hidden_sizes=tuple(config.learner.hidden_sizes),
        dueling=config.learner.dueling,
        pixel_torso=config.learner.pixel_torso,
        prev_action=config.learner.marl.prev_action,
        global_state=config.collector.global_state,
        action_noise=config.collector.action_noise,
        discrete_encoding=config.collector.discrete_encoding,
        recurrent=config.learner.recurrent,
        recurrent_hidden_size=config.learner.recurrent_hidden_size,
    )


def model_spec_for(config: RunConfig, spaces: Spaces | None = None):
    """The algorithm's model spec for the env (spaces read with :func:`env_spaces` if omitted).

    Imports torch (the spec's module).

    Returns:
        The spec built by ``NETWORKS[recipe.network_for(observation_space)]``, e.g. a
        ``ModelSpec`` (DQN), ``ActorCriticSpec`` (PPO, A2C, REINFORCE) or
        ``SquashedGaussianSpec`` (SAC).

    Raises:
        ConfigError: If the env id is unknown or its spaces do not suit the algorithm.
    """
    obs_space, action_space = spaces or env_spaces(config)
    try:
        name = recurrent_network(
            algorithm_for(config).network_for(obs_space), config.learner.recurrent
        )
        check_spaces(config, obs_space, action_space)
        spec = NETWORKS[name](network_options(config), obs_space, action_space)
    except ValueError as err:  # AlgorithmConfigError, or a builder's refusal naming the field
        raise ConfigError(str(err)) from None
    if config.learner.network:
        spec = user_network_spec(config, spec, obs_space, action_space)
    return spec


def user_network_spec(config: RunConfig, base, obs_space: gym.Space, action_space: gym.Space):
    """The spec of ``learner.network`` in place of ``base``, built once and probed (torch).

    Raises:
        ConfigError: Naming ``learner.network`` if the factory cannot be imported, fails, or
            returns a module with the wrong shapes for the family of ``base``.
    """
    import torch

    from collector.networks.contracts import probe
    from collector.networks.custom import CustomNetworkSpec
    from learner.plugins import resolve_factory

    name = config.learner.network
    try:
        factory = resolve_factory(name, "learner.network")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    spec = CustomNetworkSpec(factory, name, base, obs_space, action_space, config.learner)
    with torch.random.fork_rng(devices=[]):  # probing leaves the caller's RNG as it was
        try:
            network = spec.build()
        except TypeError as err:
            if str(err).startswith("learner.network"):
                raise ConfigError(str(err)) from None
            raise ConfigError(f"learner.network: {name} failed: {err}") from None
        except Exception as err:  # the user's code: any failure refuses the config
            raise ConfigError(f"learner.network: {name} failed: {err!r}") from None
        try:
            probe(
                spec.family, network, obs_space, action_space, name=name, algorithm=config.algorithm
            )
        except ValueError as err:
            raise ConfigError(str(err)) from None
    return spec
