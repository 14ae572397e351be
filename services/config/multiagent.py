"""What every multi-agent recipe (``multi_agent`` in its registration) shares on the config side.

Multi-agent algorithms (``learner.algorithms.marl``) run on PettingZoo parallel envs through
the wrapper in ``collector.envs.multiagent``. This module holds the refusals every such run
needs (the ``marl`` extra, a parallel-env factory, in-process vector envs, no external actors)
and reads the wrapper's spaces; what one algorithm adds (its mixer, its global state) is in
its registration.
"""

from __future__ import annotations

import importlib.util

import gymnasium as gym

from collector.envs.multiagent import (
    EXTRA,
    agent_layout,
    has_pettingzoo,
    make_parallel_env,
    vector_spaces,
)
from collector.envs.vector import is_factory_path
from collector.networks.builders import is_agent_spaces
from learner.algorithms import ALGORITHMS


class MultiAgentConfigError(ValueError):
    """A multi-agent run that cannot work; the message names the field."""


def check(config) -> None:
    """Refuses multi-agent configs that cannot run (before any actor starts; no torch).

    Raises:
        MultiAgentConfigError: Naming the field (or the ``marl`` extra when it is missing).
    """
    name = config.algorithm
    if not has_pettingzoo():
        raise MultiAgentConfigError(f"algorithm: {name} needs the marl extra; {EXTRA}")
    collector = config.collector
    example = ALGORITHMS[name].defaults.get("collector", {}).get("env_id")
    if not is_factory_path(collector.env_id):
        raise MultiAgentConfigError(
            f"collector.env_id: {name} needs a 'module:function' factory returning a PettingZoo "
            f"parallel env (e.g. {example!r}), got {collector.env_id!r}"
        )
    root = collector.env_id.partition(":")[0].split(".")[0]
    if importlib.util.find_spec(root) is None:
        hint = f"; {EXTRA}" if root == "mpe2" else ""
        raise MultiAgentConfigError(
            f"collector.env_id: cannot import {root!r} for {collector.env_id!r}{hint}"
        )
    if config.grpc.enabled:
        raise MultiAgentConfigError(
            "grpc.port: external actors insert single-agent transitions; multi-agent runs "
            f"collect with their own collectors (grpc.port: null), got {config.grpc.port}"
        )
    if collector.vector_mode != "sync":
        raise MultiAgentConfigError(
            f"collector.vector_mode: multi-agent envs step in-process ('sync'), "
            f"got {collector.vector_mode!r}"
        )


def env_spaces(config) -> tuple[gym.Space, gym.Space]:
    """The wrapper's single observation (``Dict``) and action (``MultiDiscrete``) spaces.

    Builds one env to read its agents.

    Raises:
        MultiAgentConfigError: Naming ``collector.env_id`` (not a parallel env, agents that
            cannot share a network), ``collector.global_state`` or
            ``collector.action_mask_key`` (an agent's mask entry of the wrong size).
    """
    collector = config.collector
    try:
        env = make_parallel_env(collector.env_id, collector.env_kwargs)
    except ValueError as err:
        raise MultiAgentConfigError(f"collector.{err}") from None
    except Exception as err:  # a user factory may raise anything; name the field
        raise MultiAgentConfigError(
            f"collector.env_id: {collector.env_id!r} failed: {type(err).__name__}: {err}"
        ) from None
    try:
        layout = agent_layout(env, collector.global_state, collector.action_mask_key or None)
    except ValueError as err:
        raise MultiAgentConfigError(f"collector.{err}") from None
    finally:
        env.close()
    return vector_spaces(layout, config.learner.marl.prev_action)


def check_spaces(config, obs_space: gym.Space, action_space: gym.Space) -> None:
    """Refuses spaces that are not the multi-agent wrapper's (``Dict`` and ``MultiDiscrete``)."""
    if not is_agent_spaces(obs_space, action_space):
        raise MultiAgentConfigError(
            f"collector.env_id: {config.algorithm} needs a PettingZoo parallel env, "
            f"{config.collector.env_id} has {obs_space} and {action_space}"
        )
