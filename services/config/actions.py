"""Refusals and space rewrites for action masks and factorised action spaces (no torch).

* :func:`masked_observation_space`: with ``collector.action_mask_key`` the env's observation
  space as the networks see it (the mask entry taken out, a single remaining key unwrapped:
  ``collector.envs.masks``), after refusing what cannot act under a mask: continuous actions,
  frame-deduplicated replay, external actors over gRPC (their transitions carry no mask),
  torchrl losses (they do not read the mask), and a mask entry whose size is not the action
  count. The multi-agent algorithms (IQL, VDN, QMIX) take one mask per agent: the wrapper's
  spaces carry none (``collector.envs.multiagent`` takes each agent's mask out and checks its
  size), so only the option refusals apply to them.
* :func:`factorised_actions`: ``MultiDiscrete`` and ``MultiBinary`` actions (one-dimensional)
  are taken by the policy-gradient family (a recipe with ``actions: any``: PPO, A2C, REINFORCE,
  IMPALA, APPO) over flat observations; every other algorithm is refused, naming the space, and
  so are ``Tuple`` and ``Dict`` action spaces for every algorithm.

Each refusal is an :class:`~services.config.recipes.AlgorithmConfigError` naming the field.
"""

from __future__ import annotations

import math

import gymnasium as gym

from collector.envs.masks import mask_width, strip_mask_space
from collector.networks.builders import flat_obs_dim, is_pixels
from services.config.recipes import ALGORITHMS, AlgorithmConfigError

FACTORISED = (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def _takers() -> str:
    return ", ".join(n for n, a in ALGORITHMS.items() if a.actions == "any")


def masked_observation_space(config, obs_space: gym.Space, action_space: gym.Space) -> gym.Space:
    """The observation space without the mask (unchanged without ``action_mask_key``).

    Raises:
        AlgorithmConfigError: Naming ``collector.action_mask_key``.
    """
    key = config.collector.action_mask_key
    if not key:
        return obs_space
    algo = ALGORITHMS[config.algorithm]
    field = f"collector.action_mask_key: {key!r}"
    if algo.actions == "continuous" or config.learner.loss.startswith("torchrl:"):
        raise AlgorithmConfigError(
            f"{field}: masks apply to discrete actions of relayrl's own losses; "
            f"{algo.name} with learner.loss={config.learner.loss!r} cannot take one"
        )
    if config.grpc.enabled:
        raise AlgorithmConfigError(
            f"{field}: external actors (grpc.port={config.grpc.port}) send no masks, and the "
            "run's replay stores them with every transition; serve them without masks"
        )
    if config.replay.frame_stack:
        raise AlgorithmConfigError(
            f"{field}: frame-deduplicated replay (replay.frame_stack="
            f"{config.replay.frame_stack}) does not store masks; set replay.frame_stack=0"
        )
    if algo.multi_agent:  # per-agent masks, checked by the wrapper (collector.envs.multiagent)
        return obs_space
    try:
        width = mask_width(action_space)
    except ValueError as err:
        raise AlgorithmConfigError(f"{err} ({config.collector.env_id})") from None
    if isinstance(obs_space, gym.spaces.Dict) and key in obs_space.spaces:
        entry = obs_space.spaces[key]
        size = math.prod(entry.shape) if entry.shape is not None else -1
        if size != width:
            raise AlgorithmConfigError(
                f"{field}: the observation's mask {entry} has {size} entries, the action space "
                f"{action_space} needs {width}"
            )
    return strip_mask_space(obs_space, key)


def factorised_actions(config, obs_space: gym.Space, action_space: gym.Space) -> bool:
    """Whether the action space is ``MultiDiscrete``/``MultiBinary`` and the algorithm takes it.

    Raises:
        AlgorithmConfigError: Naming ``collector.env_id`` and the space, for an algorithm that
            cannot take it, a multi-dimensional one, pixel observations, or ``Tuple`` and
            ``Dict`` actions.
    """
    algo = ALGORITHMS[config.algorithm]
    env_id = config.collector.env_id
    if isinstance(action_space, gym.spaces.Tuple | gym.spaces.Dict):
        raise AlgorithmConfigError(
            f"collector.env_id: {algo.name} cannot take the action space {action_space} of "
            f"{env_id}: Tuple and Dict actions are not supported (Discrete, Box, and for "
            f"{_takers()} MultiDiscrete and MultiBinary are)"
        )
    if not isinstance(action_space, FACTORISED):
        return False
    if algo.actions != "any":
        raise AlgorithmConfigError(
            f"collector.env_id: {algo.name} cannot take the action space {action_space} of "
            f"{env_id} ({type(action_space).__name__} actions: {_takers()})"
        )
    if len(action_space.shape) != 1:
        raise AlgorithmConfigError(
            f"collector.env_id: {type(action_space).__name__} actions must be one-dimensional, "
            f"{env_id} has {action_space}"
        )
    if algo.pixel_network is not None and is_pixels(obs_space):
        raise AlgorithmConfigError(
            f"collector.env_id: {algo.name} on pixels needs a discrete action space, "
            f"{env_id} has {action_space}"
        )
    try:
        flat_obs_dim(env_id, obs_space)
    except ValueError as err:
        raise AlgorithmConfigError(str(err)) from None
    return True
