"""The run's transition spec, read off its env: what every external batch is checked against."""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym

from collector.envs.vector import is_factory_path, resolve_factory
from replay.wire.batches import TransitionSpec, transition_spec


def env_transition_spec(env_id: str, env_kwargs: Mapping | None = None) -> TransitionSpec:
    """Makes the env once (a gymnasium id or ``module:function``) and reads its spec."""
    if is_factory_path(env_id):
        env = resolve_factory(env_id)(**dict(env_kwargs or {}))
    else:
        env = gym.make(env_id, **dict(env_kwargs or {}))
    try:
        return transition_spec(env.observation_space, env.action_space)
    finally:
        env.close()
