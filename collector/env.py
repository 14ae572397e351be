"""Environment construction for collectors: gymnasium ids or ``module:function`` factories."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

VECTOR_MODES = ("sync", "async")
AUTORESET_MODES = {
    "next_step": gym.vector.AutoresetMode.NEXT_STEP,
    "same_step": gym.vector.AutoresetMode.SAME_STEP,
}


def is_factory_path(env_id: str) -> bool:
    """Whether ``env_id`` names a ``module:function`` factory rather than a gymnasium id.

    Examples:
        >>> is_factory_path("CartPole-v1"), is_factory_path("my_pkg.envs:make_env")
        (False, True)
    """
    module, sep, function = env_id.partition(":")
    return bool(sep) and bool(module) and function.isidentifier()


def resolve_factory(path: str) -> Callable[..., gym.Env]:
    """Imports the factory named by ``"package.module:function"``.

    Raises:
        ValueError: If the module or the function cannot be found.
    """
    module_name, _, function_name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"env_id: cannot import module {module_name!r}: {err}") from None
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise ValueError(f"env_id: {module_name!r} has no callable {function_name!r}")
    return factory


def make_vector_env(
    env_id: str,
    num_envs: int,
    *,
    mode: str = "sync",
    env_kwargs: Mapping[str, Any] | None = None,
    autoreset: str = "next_step",
) -> gym.vector.VectorEnv:
    """Builds a vector env in gymnasium's ``NEXT_STEP`` (or ``SAME_STEP``) autoreset mode.

    The env does not copy its observation buffer on every step (``copy=False``): the returned
    observations are overwritten by the next step, so consumers copy what they keep (the
    rollout worker copies each into its rollout buffer right away).

    Args:
        env_id: A registered gymnasium id (``"CartPole-v1"``) or a factory path
            (``"my_pkg.envs:make_env"``) whose function returns one ``gymnasium.Env``.
        num_envs: Number of sub-environments.
        mode: ``"sync"`` (all envs in this process) or ``"async"`` (one subprocess per env).
        env_kwargs: Keyword arguments for ``gymnasium.make`` or for the factory.
        autoreset: ``next_step`` (off-policy collectors: the step after an episode's end
            resets) or ``same_step`` (on-policy collectors: the ending step returns the next
            episode's first observation and the final one in ``info["final_obs"]``).

    Returns:
        The vector env (not reset yet).

    Raises:
        ValueError: If ``mode`` is unknown or the factory cannot be resolved.

    Examples:
        >>> envs = make_vector_env("CartPole-v1", 2, env_kwargs={"max_episode_steps": 50})
        >>> envs.num_envs
        2
    """
    if mode not in VECTOR_MODES:
        raise ValueError(f"vector_mode: must be one of {VECTOR_MODES}, got {mode!r}")
    kwargs = dict(env_kwargs or {})
    autoreset = AUTORESET_MODES[autoreset]
    if not is_factory_path(env_id):
        return gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=mode,
            vector_kwargs={"autoreset_mode": autoreset, "copy": False},
            **kwargs,
        )
    env_fn = functools.partial(resolve_factory(env_id), **kwargs)
    vector_cls = gym.vector.SyncVectorEnv if mode == "sync" else gym.vector.AsyncVectorEnv
    return vector_cls([env_fn] * num_envs, autoreset_mode=autoreset, copy=False)


def env_seeds(
    run_seed: int, collector_id: int, num_envs: int, epoch: int = 0, stream: int = 0
) -> list[int]:
    """Distinct, reproducible per-env reset seeds.

    Args:
        run_seed: The run's seed.
        collector_id: Index of the collector.
        num_envs: Sub-envs of the collector.
        epoch: 0 at the start of a run; a restore re-seeds with a later epoch so the fresh
            episodes differ from the run's first ones but are the same for every restore of
            the same state.
        stream: 0 for the reset seeds above; other streams give independent seeds for the same
            epoch (whole-episode rollouts reset with ``stream=1`` and the rollout's number).
    """
    entropy = [run_seed, collector_id] if epoch == 0 else [run_seed, collector_id, epoch]
    if stream:
        entropy.append(stream)
    state = np.random.SeedSequence(entropy).generate_state(num_envs)
    return [int(s) for s in state]
