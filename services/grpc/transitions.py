"""The run's transition spec, read off its env: what every external batch is checked against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from collector.envs.spaces import observation_space
from collector.envs.vector import make_env
from replay.wire.batches import TransitionSpec, transition_spec


def env_transition_spec(
    env_id: str,
    env_kwargs: Mapping | None = None,
    observation_keys: Sequence[str] = (),
    images: Sequence = (),
) -> TransitionSpec:
    """Makes the env once (a gymnasium id or ``module:function``) and reads its spec.

    A ``Dict``/``Tuple`` observation is read as collectors see it: flattened by key path and
    restricted to ``observation_keys`` (``collector.envs.spaces``), one named field per key,
    image keys preprocessed as ``images`` says (``collector.image_keys``).
    """
    env = make_env(env_id, **dict(env_kwargs or {}))
    try:
        space = observation_space(
            env.observation_space, observation_keys, env_id=env_id, images=images
        )
        return transition_spec(space, env.action_space)
    finally:
        env.close()
