"""The multi-agent recipes' parts: IQL, VDN and QMIX on PettingZoo parallel envs.

``services.config.recipes`` registers three recipes (``iql``, ``vdn``, ``qmix``) that differ
only in ``learner.marl.mixer``; they share the off-policy loop, the ``marl`` loss
(``learner.losses.marl``), the ``agents`` network (``collector.networks.builders``: per-agent
epsilon-greedy over one parameter-shared agent network, ``collector.networks.agents``), and the
env wrapper (``collector.envs.multiagent``). This module holds what the recipes and their checks
call: the defaults (Spread, ``simple_spread_v3`` from ``mpe2``), the refusals and the env's
spaces.
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

SPREAD = "mpe2.simple_spread_v3:parallel_env"
MIXER_OF = {"iql": "none", "vdn": "vdn", "qmix": "qmix"}

# Spread with three agents and discrete actions; the learning rule follows EPyMARL's and
# TorchRL's QMIX/VDN setups (shared 64-unit agent MLP, Adam 5e-4, hard target updates every 200
# steps), scaled to this project's CPU budgets. Episodes end by truncation after 25 steps and
# targets bootstrap through it, so gamma 0.95 (a horizon of about 20 steps) keeps the values
# near the returns they predict instead of -r / (1 - 0.99).
DEFAULTS = {
    "collector": {
        "env_id": SPREAD,  # its defaults: N=3 agents, max_cycles=25, discrete actions
        "envs_per_collector": 8,
        "rollout_frames": 200,
        "n_step": 1,
        "gamma": 0.95,
        "epsilon_start": 1.0,
        "epsilon_end": 0.05,
        "epsilon_anneal_frames": 50_000,
    },
    "replay": {"capacity": 100_000},
    "learner": {
        "loss": "marl",
        "hidden_sizes": [64, 64],
        "lr": 5e-4,
        "gamma": 0.95,
        "global_batch_size": 256,
        "max_grad_norm": 10.0,
        "target_update_interval": 200,
        "target_update_tau": 1.0,
    },
    "controller": {
        "init_random_frames": 2_000,
        "utd_ratio": 0.125,
        "return_milestones": [],
    },
}


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
    collector, options = config.collector, config.learner.marl
    if not is_factory_path(collector.env_id):
        raise MultiAgentConfigError(
            f"collector.env_id: {name} needs a 'module:function' factory returning a PettingZoo "
            f"parallel env (e.g. {SPREAD!r}), got {collector.env_id!r}"
        )
    root = collector.env_id.partition(":")[0].split(".")[0]
    if importlib.util.find_spec(root) is None:
        hint = f"; {EXTRA}" if root == "mpe2" else ""
        raise MultiAgentConfigError(
            f"collector.env_id: cannot import {root!r} for {collector.env_id!r}{hint}"
        )
    if options.mixer != MIXER_OF[name]:
        raise MultiAgentConfigError(
            f"learner.marl.mixer: algorithm {name} mixes with {MIXER_OF[name]!r}, "
            f"got {options.mixer!r} (choose the algorithm: iql, vdn or qmix)"
        )
    if options.mixer == "qmix" and collector.global_state == "none":
        raise MultiAgentConfigError(
            "collector.global_state: qmix conditions its mixer on the global state; "
            "use 'auto', 'env' or 'observations', got 'none'"
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
            cannot share a network) or ``collector.global_state``.
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
        layout = agent_layout(env, collector.global_state)
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
