"""The run's transition spec, read off its env: what every external batch is checked against.

A run with ``replay.sequence_length`` stores sequences, so its external batches are checked
against its :class:`replay.wire.sequences.SequenceSpec` (:func:`run_spec`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from collector.envs.spaces import observation_space
from collector.envs.vector import make_env
from replay.wire.batches import TransitionSpec, transition_spec
from replay.wire.sequences import sequence_spec


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


def run_spec(config) -> TransitionSpec:
    """What the run's external batches are checked against: transitions, or its sequences.

    Args:
        config: The run's ``RunConfig``: its env (``collector``), and with
            ``replay.sequence_length`` the layout (``replay.sequence_*``, ``burn_in``) and the
            recurrent state size of ``learner.recurrent``/``recurrent_hidden_size``.
    """
    from collector.envs.images import parse
    from collector.networks.recurrent import state_size

    collector, replay, learner = config.collector, config.replay, config.learner
    steps = env_transition_spec(
        collector.env_id, collector.env_kwargs, collector.observation_keys,
        parse(collector.image_keys),
    )  # fmt: skip
    if not replay.sequences:
        return steps
    return sequence_spec(
        steps,
        length=replay.sequence_length,
        overlap=replay.sequence_overlap,
        burn_in=replay.burn_in,
        state_size=state_size(learner.recurrent, learner.recurrent_hidden_size),
    )
