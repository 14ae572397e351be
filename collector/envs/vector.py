"""Environment construction for collectors: gymnasium ids or ``module:function`` factories."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from collector.config import VECTOR_MODES
from collector.envs.spaces import structured

# Gymnasium env families whose dependencies are relayrl extras (pyproject.toml), by the module
# of their entry point.
ENV_EXTRAS = {"gymnasium.envs.box2d.": "box2d", "gymnasium.envs.mujoco.": "mujoco"}
# Env ids registered by importing a package, by id prefix: (package, relayrl extra).
ENV_PACKAGES = {
    "MiniGrid-": ("minigrid", "minigrid"),
    "popgym-": ("popgym", "popgym"),  # POPGym's memory tasks: popgym-RepeatPreviousEasy-v0
}
RELAYRL_PREFIX = "relayrl:"  # relayrl's own envs (collector.envs.memory)
AUTORESET_MODES = {
    "next_step": gym.vector.AutoresetMode.NEXT_STEP,
    "same_step": gym.vector.AutoresetMode.SAME_STEP,
}


def gym_id(env_id: str) -> str:
    """The gymnasium id of ``env_id``: relayrl's own ``relayrl:Name-vN`` -> ``relayrl/Name-vN``.

    Importing :mod:`collector.envs.memory` registers relayrl's envs; other ids are unchanged.

    Examples:
        >>> gym_id("relayrl:StatelessCartPole-v1"), gym_id("CartPole-v1")
        ('relayrl/StatelessCartPole-v1', 'CartPole-v1')
    """
    if not env_id.startswith(RELAYRL_PREFIX):
        return env_id
    from collector.envs import memory

    return f"{memory.NAMESPACE}/{env_id[len(RELAYRL_PREFIX) :]}"


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """One env: a factory path's function, or ``gymnasium.make`` of a (relayrl or extra) id."""
    if is_factory_path(env_id):
        return resolve_factory(env_id)(**kwargs)
    register_env_package(env_id)
    return gym.make(gym_id(env_id), **kwargs)


def is_factory_path(env_id: str) -> bool:
    """Whether ``env_id`` names a ``module:function`` factory rather than a gymnasium id.

    Examples:
        >>> is_factory_path("CartPole-v1"), is_factory_path("my_pkg.envs:make_env")
        (False, True)
    """
    module, sep, function = env_id.partition(":")
    return bool(sep) and bool(module) and function.isidentifier()


def extra_for(env_id: str) -> str | None:
    """The relayrl extra a registered gymnasium env needs (``box2d``, ``mujoco``), or None.

    Examples:
        >>> extra_for("LunarLander-v3"), extra_for("Hopper-v5"), extra_for("CartPole-v1")
        ('box2d', 'mujoco', None)
    """
    if is_factory_path(env_id):
        return None
    try:
        entry_point = gym.spec(gym_id(env_id)).entry_point
    except gym.error.Error:
        return None
    if not isinstance(entry_point, str):
        return None
    return next((x for prefix, x in ENV_EXTRAS.items() if entry_point.startswith(prefix)), None)


def register_env_package(
    env_id: str, packages: Mapping[str, tuple[str, str]] = ENV_PACKAGES
) -> None:
    """Imports the package that registers ``env_id`` (MiniGrid's ids live in ``minigrid``).

    Raises:
        ImportError: Naming the relayrl extra to install, if the package is missing.
    """
    for prefix, (package, extra) in packages.items():
        if env_id.startswith(prefix):
            try:
                importlib.import_module(package)
            except ImportError:
                raise ImportError(
                    f'the {extra} extra is not installed: pip install "relayrl[{extra}]"'
                ) from None


def missing_extra_hint(env_id: str) -> str | None:
    """``the <extra> extra is not installed: pip install "relayrl[<extra>]"`` for the env."""
    extra = extra_for(env_id)
    if extra is None:
        return None
    return f'the {extra} extra is not installed: pip install "relayrl[{extra}]"'


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
    wrap: Callable[[gym.Env, int], gym.Env] | None = None,
    action_mask_key: str | None = None,
    observation_keys: Sequence[str] = (),
    images: Sequence = (),
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
        wrap: ``wrap(env, index)`` wraps each sub-env as it is made (e.g. gymnasium's
            ``RecordVideo``); None: none.
        action_mask_key: Moves the observation's action mask into the info
            (:class:`collector.envs.masks.MaskToInfo`), before anything else sees the
            observation; None: observations as they are.
        observation_keys: A ``Dict``/``Tuple`` observation (what is left of it once the mask
            is out) is flattened by key path (:func:`collector.envs.spaces.structured`),
            keeping only these keys (empty: all).
        images: Image keys of it to preprocess (:mod:`collector.envs.images`, the network
            spec's ``layout.images``).

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
        register_env_package(env_id)
    make = (
        resolve_factory(env_id)
        if is_factory_path(env_id)
        else functools.partial(gym.make, gym_id(env_id))
    )
    keys = tuple(observation_keys)
    env_fns = [
        functools.partial(
            _guarded, make, kwargs, env_id, i, wrap, keys, action_mask_key, tuple(images)
        )
        for i in range(num_envs)
    ]
    vector_cls = gym.vector.SyncVectorEnv if mode == "sync" else gym.vector.AsyncVectorEnv
    return vector_cls(env_fns, autoreset_mode=autoreset, copy=False)


class EnvError(RuntimeError):
    """An exception raised inside one sub-env, tagged with the env id and its index.

    Args:
        env_id: The env's gymnasium id or factory path.
        index: The sub-env's index in its vector env (-1: unknown).
        error: What it raised, as text.
    """

    def __init__(self, env_id: str, index: int, error: str) -> None:
        super().__init__(f"env {env_id} #{index}: {error}")
        self.env_id = env_id
        self.index = index
        self.error = error

    def __reduce__(self):
        return EnvError, (self.env_id, self.index, self.error)


class GuardedEnv(gym.Wrapper):
    """Re-raises any exception of ``step``/``reset`` as an :class:`EnvError` naming the env."""

    def __init__(self, env: gym.Env, env_id: str, index: int) -> None:
        super().__init__(env)
        self.env_id = env_id
        self.index = index

    def step(self, action):
        """Steps the env; see the class docstring."""
        try:
            return self.env.step(action)
        except Exception as err:
            raise EnvError(self.env_id, self.index, f"{type(err).__name__}: {err}") from err

    def reset(self, *, seed=None, options=None):
        """Resets the env; see the class docstring."""
        try:
            return self.env.reset(seed=seed, options=options)
        except Exception as err:
            raise EnvError(self.env_id, self.index, f"{type(err).__name__}: {err}") from err


def _guarded(
    make: Callable[..., gym.Env],
    kwargs: dict,
    env_id: str,
    index: int,
    wrap=None,
    keys=(),
    mask_key: str | None = None,
    images=(),
) -> gym.Env:
    env = make(**kwargs)
    if mask_key:  # the mask leaves the observation first (collector.envs.masks)
        from collector.envs.masks import MaskToInfo

        env = MaskToInfo(env, mask_key)
    env = structured(env, keys, env_id=env_id, images=images)
    return GuardedEnv(env if wrap is None else wrap(env, index), env_id, index)


# Tags the seeds of collectors started at a generation > 0 (see env_seeds).
GENERATION_TAG = 0x9E37


def env_seeds(
    run_seed: int,
    collector_id: int,
    num_envs: int,
    epoch: int = 0,
    stream: int = 0,
    generation: int = 0,
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
        generation: 0 for a run's first collectors; collectors started by a resumed run at
            another size, or added to a running one, use the run's learner generation, so
            their env streams differ from every earlier collector's (``collector.manage.fleet``).
    """
    entropy = [run_seed, collector_id] if epoch == 0 else [run_seed, collector_id, epoch]
    if stream:
        entropy.append(stream)
    if generation:
        entropy = [run_seed, collector_id, epoch, stream, generation, GENERATION_TAG]
    state = np.random.SeedSequence(entropy).generate_state(num_envs)
    return [int(s) for s in state]
