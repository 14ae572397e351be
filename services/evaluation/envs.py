"""The envs an evaluation runs on: the run's evaluation env, built as its collectors build theirs.

:func:`evaluation_env` reads which env (``evaluation.env_id``, else the training env) and
:func:`make_evaluation_envs` builds ``num_envs`` of them in ``NEXT_STEP`` autoreset mode, through
the network spec's own env builder where it has one (the multi-agent wrapper), so the evaluator
actor and ``python -m services.evaluate`` play the same episodes for the same seeds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def evaluation_env(config) -> tuple[str, dict[str, Any]]:
    """``(env_id, env_kwargs)`` of a run's evaluation env.

    Examples:
        >>> from services.config import load_config
        >>> evaluation_env(load_config(overrides=["evaluation.env_id=Acrobot-v1"]))
        ('Acrobot-v1', {})
    """
    cfg, collector = config.evaluation, config.collector
    if cfg.env_id:
        return cfg.env_id, dict(cfg.env_kwargs)
    return collector.env_id, dict(collector.env_kwargs)


def make_evaluation_envs(
    model_spec,
    env_id: str,
    num_envs: int,
    env_kwargs: dict[str, Any] | None = None,
    *,
    wrap: Callable | None = None,
    action_mask_key: str | None = None,
):
    """``num_envs`` envs for ``model_spec``'s policy (not reset yet).

    Args:
        model_spec: The run's network spec; one with ``make_vector_env`` (multi-agent) builds
            its own envs.
        env_id: A gymnasium id or ``module:function`` factory.
        num_envs: Envs stepped side by side.
        env_kwargs: Keyword arguments of ``env_id``.
        wrap: ``wrap(env, index)`` around each gymnasium sub-env (``collector.envs.vector``).
        action_mask_key: Where the env reports action masks (``collector.envs.masks``).

    Raises:
        ValueError: If ``wrap`` is given for envs the spec builds itself.
    """
    if hasattr(model_spec, "make_vector_env"):
        if wrap is not None:
            raise ValueError(f"{env_id}: its envs are not gymnasium envs and cannot be wrapped")
        masks = {"action_mask_key": action_mask_key} if action_mask_key else {}
        return model_spec.make_vector_env(env_id, num_envs, env_kwargs=env_kwargs, **masks)
    from collector.envs.images import images_of
    from collector.envs.spaces import observation_keys_of
    from collector.envs.vector import make_vector_env  # gymnasium: imported where envs are made

    keys = observation_keys_of(model_spec)
    return make_vector_env(
        env_id,
        num_envs,
        env_kwargs=env_kwargs,
        wrap=wrap,
        action_mask_key=action_mask_key,
        observation_keys=keys,
        images=images_of(model_spec),
    )
