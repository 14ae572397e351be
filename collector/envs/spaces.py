"""Structured observations: a pure description of a ``Dict``/``Tuple`` space, flattened by key.

Environments beyond the classic control set observe several things at once: MiniGrid's
``{image, direction, mission}``, a camera image next to a state vector, robotics'
``{observation, achieved_goal, desired_goal}``. relayrl flattens such a space once, at the env,
into a ``Dict`` of leaves keyed by their path (nested ``Dict`` keys and ``Tuple`` indices joined
by ``.``: ``image``, ``state``, ``pos.0``), as TorchRL's composite specs and SB3's
``MultiInputPolicy`` do:

    * :func:`describe` turns a gymnasium space into an :class:`ObservationLayout` (key path ->
      shape, dtype, kind), refusing what no network can take with a ``ValueError`` naming the
      space and the key path (``Text``, ``Graph``, ``Sequence``, ...);
    * :class:`FlatObservation` wraps an env so it returns that flat dict
      (:class:`ObservationDict`, a ``Dict`` space collectors recognise), keeping only
      ``collector.observation_keys`` when set;
    * :func:`stored` names each leaf's replay column: ``observation.<key>`` (and the n-step
      buffer adds ``next_observation.<key>``), so every key is its own column in replay,
      checkpoints, elastic re-sharding and on the gRPC wire; :func:`regroup` nests them back under
      ``observation`` for the learner, so losses hand ``batch["observation"]`` (a mapping of
      tensors) to the network as before.

Leaf kinds (what :mod:`collector.networks.encoders` builds for each): ``image`` (rank-3 uint8,
channels last or first, at least 36 pixels a side: the Nature CNN), ``vector`` (any other
``Box``, any rank, flattened), ``discrete`` (``Discrete``: one-hot, stored int64),
``multi_discrete`` (one one-hot per dimension), ``binary`` (``MultiBinary``, stored int8).
A plain ``Box`` observation is none of this: it travels as one ``observation`` array, as ever.

Examples:
    >>> import gymnasium as gym
    >>> space = gym.spaces.Dict(
    ...     {"pos": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(0, 1, (2,)))),
    ...      "flags": gym.spaces.MultiBinary(4)}
    ... )
    >>> layout = describe(space)
    >>> [(leaf.key, leaf.kind, leaf.shape) for leaf in layout.leaves]
    [('flags', 'binary', (4,)), ('pos.0', 'discrete', ()), ('pos.1', 'vector', (2,))]
    >>> sorted(stored({"flags": 1, "pos.0": 2}))
    ['observation.flags', 'observation.pos.0']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

SEPARATOR = "."
PREFIX = "observation" + SEPARATOR
NEXT_PREFIX = "next_" + PREFIX
KINDS = ("image", "vector", "discrete", "multi_discrete", "binary")
# Smallest side of an image the Nature CNN takes (8x8/4, 4x4/2, 3x3/1 convolutions).
MIN_IMAGE_SIDE = 36


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One observation key.

    Attributes:
        key: Its path (``image``, ``pos.0``; ``""`` for a whole non-``Dict`` observation).
        kind: One of :data:`KINDS`.
        shape: Per-item shape as stored.
        dtype: numpy dtype name as stored.
        sizes: ``discrete``: ``(n,)``; ``multi_discrete``: each dimension's ``n`` (flattened).
        starts: The matching ``start`` offsets (``Discrete(n, start=s)``).
    """

    key: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    sizes: tuple[int, ...] = ()
    starts: tuple[int, ...] = ()

    @property
    def width(self) -> int:
        """Features it adds to a flat vector (one-hot widths; elements otherwise)."""
        if self.kind in ("discrete", "multi_discrete"):
            return int(sum(self.sizes))
        return int(np.prod(self.shape, dtype=np.int64))


@dataclasses.dataclass(frozen=True)
class ObservationLayout:
    """The leaves of an observation space, in key order.

    Attributes:
        leaves: One :class:`Leaf` per key.
        keyed: Whether observations are dicts (a ``Dict``/``Tuple`` space) rather than one array.
        images: The image keys preprocessed (``collector.image_keys``,
            :class:`collector.envs.images.ImageKey`); their leaves have the preprocessed shape.
    """

    leaves: tuple[Leaf, ...]
    keyed: bool = True
    images: tuple = ()

    @property
    def keys(self) -> tuple[str, ...]:
        """The leaves' keys."""
        return tuple(leaf.key for leaf in self.leaves)


def is_structured(space: gym.Space) -> bool:
    """Whether ``space`` needs the flattening wrapper (a ``Dict`` or a ``Tuple``)."""
    return isinstance(space, gym.spaces.Dict | gym.spaces.Tuple)


def leaves(space: gym.Space, path: str = "") -> list[tuple[str, gym.Space]]:
    """``(key path, space)`` of every leaf of nested ``Dict``/``Tuple`` spaces, in order."""
    if isinstance(space, ObservationDict):  # flattened already: its keys are the paths
        return [(path + key, sub) for key, sub in space.spaces.items()]
    if isinstance(space, gym.spaces.Dict):
        found = []
        for key, sub in space.spaces.items():
            if SEPARATOR in str(key):
                raise ValueError(
                    f"observation key {path + str(key)!r}: keys may not contain {SEPARATOR!r}"
                )
            found += leaves(sub, f"{path}{key}{SEPARATOR}")
        return found
    if isinstance(space, gym.spaces.Tuple):
        found = []
        for index, sub in enumerate(space.spaces):
            found += leaves(sub, f"{path}{index}{SEPARATOR}")
        return found
    return [(path[: -len(SEPARATOR)] if path else "", space)]


def describe_leaf(key: str, space: gym.Space, *, env_id: str = "the env") -> Leaf:
    """The :class:`Leaf` of one space.

    Raises:
        ValueError: Naming ``collector.env_id``, the key path and the space for a space no
            encoder takes (``Text``, ``Graph``, ``Sequence``, an empty ``Box``, ...).
    """
    if isinstance(space, gym.spaces.Box) and np.prod(space.shape) > 0:
        shape = tuple(int(x) for x in space.shape)
        dtype = np.dtype(space.dtype)
        if len(shape) == 3 and dtype == np.uint8 and image_side(shape) >= MIN_IMAGE_SIDE:
            return Leaf(key, "image", shape, "uint8")
        if dtype.kind == "f":  # float64 sensors are stored (and learned from) as float32
            dtype = np.dtype(np.float32)
        return Leaf(key, "vector", shape, dtype.name)
    if isinstance(space, gym.spaces.Discrete):
        return Leaf(key, "discrete", (), "int64", (int(space.n),), (int(space.start),))
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec).ravel()
        starts = np.asarray(space.start).ravel()
        return Leaf(
            key,
            "multi_discrete",
            tuple(int(x) for x in space.shape),
            "int64",
            tuple(int(x) for x in nvec),
            tuple(int(x) for x in starts),
        )
    if isinstance(space, gym.spaces.MultiBinary):
        return Leaf(key, "binary", tuple(int(x) for x in np.atleast_1d(space.n)), "int8")
    where = f"observation key {key!r}" if key else "the observation"
    hint = "; drop it with collector.observation_keys (the keys to keep)" if key else ""
    raise ValueError(
        f"collector.env_id: {env_id}: {where} is a {type(space).__name__} ({space}), which no "
        f"observation encoder takes (accepted: Box, Discrete, MultiDiscrete, MultiBinary, nested "
        f"in Dict/Tuple){hint}"
    )


def image_side(shape: tuple[int, ...]) -> int:
    """The smaller spatial side of a ``[H, W, C]`` or ``[C, H, W]`` image."""
    height, width = image_hw(shape)
    return min(height, width)


def channels_last(shape: tuple[int, ...]) -> bool:
    """Whether a rank-3 image is ``[H, W, C]`` (gymnasium's convention) rather than ``[C, H, W]``.

    Examples:
        >>> channels_last((64, 64, 3)), channels_last((4, 84, 84))
        (True, False)
    """
    return shape[-1] <= 4 < shape[0] or (shape[-1] < shape[0] and shape[-1] <= 4)


def image_hw(shape: tuple[int, ...]) -> tuple[int, int]:
    """``(height, width)`` of a rank-3 image shape."""
    return (shape[0], shape[1]) if channels_last(shape) else (shape[1], shape[2])


def describe(
    space: gym.Space, *, keys: Sequence[str] = (), env_id: str = "the env", images: Sequence = ()
) -> ObservationLayout:
    """The layout of an observation space (``keys``: keep only these top-level or dotted keys).

    ``images`` preprocesses image keys (:func:`collector.envs.images.bind`).

    Raises:
        ValueError: Naming the key path and the space (see :func:`describe_leaf`), a key of
            ``collector.observation_keys`` the space does not have, or an image key refused
            (naming ``collector.image_keys``).
    """
    if images:
        from collector.envs.images import bind

        return bind(describe(space, keys=keys, env_id=env_id), images, env_id=env_id)
    if not is_structured(space):
        if keys:
            raise ValueError(
                f"collector.observation_keys: {env_id} has no Dict/Tuple observation "
                f"({space}); got {list(keys)}"
            )
        return ObservationLayout((describe_leaf("", space, env_id=env_id),), keyed=False)
    found = leaves(space)
    bound = tuple(getattr(space, "images", ()))  # a flattened space's preprocessed image keys
    if keys:
        for key in keys:
            if not any(_selected(path, (key,)) for path, _ in found):
                names = sorted({path for path, _ in found})
                raise ValueError(
                    f"collector.observation_keys: {key!r} is not an observation key of "
                    f"{env_id} (its keys: {names})"
                )
        found = [(path, sub) for path, sub in found if _selected(path, keys)]
    chosen = tuple(describe_leaf(p, s, env_id=env_id) for p, s in found)
    kept = {leaf.key for leaf in chosen}
    return ObservationLayout(chosen, images=tuple(i for i in bound if i.key in kept))


def _selected(path: str, keys: Sequence[str]) -> bool:
    return any(path == key or path.startswith(key + SEPARATOR) for key in keys)


def leaf_space(leaf: Leaf) -> gym.Space:
    """The gymnasium space a flattened leaf lives in (float vectors unbounded)."""
    if leaf.kind == "discrete":
        return gym.spaces.Discrete(leaf.sizes[0], start=leaf.starts[0])
    if leaf.kind == "multi_discrete":
        nvec = np.asarray(leaf.sizes).reshape(leaf.shape)
        return gym.spaces.MultiDiscrete(nvec, start=np.asarray(leaf.starts).reshape(leaf.shape))
    if leaf.kind == "binary":
        return gym.spaces.MultiBinary(list(leaf.shape))
    if leaf.kind == "image":
        return gym.spaces.Box(0, 255, leaf.shape, np.uint8)
    dtype = np.dtype(leaf.dtype)
    if dtype.kind == "f":
        return gym.spaces.Box(-np.inf, np.inf, leaf.shape, dtype)
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    low, high = (info.min, info.max) if info is not None else (0, 1)
    return gym.spaces.Box(low, high, leaf.shape, dtype)


class ObservationDict(gym.spaces.Dict):
    """The flat ``Dict`` space of :class:`FlatObservation` (collectors store it by key).

    Its ``images`` are the layout's preprocessed image keys (``collector.envs.images``).
    """

    images: tuple = ()


def flat_space(layout: ObservationLayout) -> ObservationDict:
    """The flat ``Dict`` space of a layout's leaves (keys in layout order)."""
    import collections

    space = ObservationDict(collections.OrderedDict((f.key, leaf_space(f)) for f in layout.leaves))
    space.images = layout.images
    return space


def flatten(observation: Any, layout: ObservationLayout) -> dict[str, np.ndarray]:
    """A nested ``Dict``/``Tuple`` observation as the flat dict of its layout's leaves."""
    flat = {}
    for leaf in layout.leaves:
        value = observation
        for part in leaf.key.split(SEPARATOR):
            value = value[int(part)] if isinstance(value, tuple | list) else value[part]
        flat[leaf.key] = np.asarray(value, dtype=leaf.dtype)
    return flat


class FlatObservation(gym.ObservationWrapper):
    """Returns an env's ``Dict``/``Tuple`` observations as the flat dict of their leaves.

    Args:
        env: An env with a structured observation space.
        keys: Keep only these keys (``collector.observation_keys``; empty: all).
        env_id: Named in refusals.

    Raises:
        ValueError: As :func:`describe`.

    Examples:
        >>> from collector.envs.testing import CameraEnv
        >>> env = FlatObservation(CameraEnv(size=36))
        >>> obs, _ = env.reset(seed=0)
        >>> {k: (v.shape, v.dtype.name) for k, v in obs.items()}
        {'image': ((36, 36, 3), 'uint8'), 'state': ((4,), 'float32')}
    """

    def __init__(self, env: gym.Env, keys: Sequence[str] = (), *, env_id: str = "the env"):
        super().__init__(env)
        self.layout = describe(env.observation_space, keys=keys, env_id=env_id)
        self.observation_space = flat_space(self.layout)

    def observation(self, observation):
        """The flat dict of ``observation``'s leaves."""
        return flatten(observation, self.layout)


def structured(
    env: gym.Env, keys: Sequence[str] = (), *, env_id: str = "the env", images: Sequence = ()
) -> gym.Env:
    """``env`` wrapped by :class:`FlatObservation` if its observations are a ``Dict``/``Tuple``.

    ``images`` adds :class:`collector.envs.images.ImageObservation` on the flat dict.
    """
    if isinstance(env.observation_space, ObservationDict) or not is_structured(
        env.observation_space
    ):
        if images:  # refused, naming collector.image_keys
            describe(env.observation_space, keys=keys, env_id=env_id, images=images)
        return env
    from collector.envs.images import structured_images

    return structured_images(FlatObservation(env, keys, env_id=env_id), images, env_id=env_id)


def observation_space(
    space: gym.Space, keys: Sequence[str] = (), *, env_id: str = "the env", images: Sequence = ()
) -> gym.Space:
    """The space collectors see: a ``Dict``/``Tuple`` flattened (see :func:`structured`)."""
    if isinstance(space, ObservationDict) or not is_structured(space):
        if keys or images:  # refuses keys of a flat space
            describe(space, keys=keys, env_id=env_id, images=images)
        return space
    return flat_space(describe(space, keys=keys, env_id=env_id, images=images))


def observation_keys_of(spec: Any) -> tuple[str, ...]:
    """The leaf keys a network spec was built for (its ``layout``; a user's spec's base's).

    Collectors build envs keeping exactly these keys, which is ``collector.observation_keys``
    resolved (the driver built the spec from the selected space). Empty: no layout, keep all.
    """
    layout = getattr(spec, "layout", None) or getattr(getattr(spec, "base", None), "layout", None)
    if layout is None or not getattr(layout, "keyed", False):
        return ()
    return tuple(layout.keys)


def copied(obs: Any) -> Any:
    """A copy of a batch of observations (an array, or a mapping of arrays)."""
    if isinstance(obs, Mapping):
        return {key: np.array(value) for key, value in obs.items()}
    return np.array(obs)


def stacked(observations: Sequence[Any]) -> Any:
    """``np.stack`` of observations (arrays, or mappings of arrays stacked key by key)."""
    if observations and isinstance(observations[0], Mapping):
        return {key: np.stack([o[key] for o in observations]) for key in observations[0]}
    return np.stack([np.asarray(o) for o in observations])


def concatenated(observations: Sequence[Any]) -> Any:
    """``np.concatenate`` of observation batches (key by key for mappings)."""
    if observations and isinstance(observations[0], Mapping):
        return {key: np.concatenate([o[key] for o in observations]) for key in observations[0]}
    return np.concatenate(observations)


def stored(observation: Mapping[str, Any], prefix: str = PREFIX) -> dict[str, Any]:
    """A flat observation's entries under their replay column names (``observation.<key>``)."""
    return {prefix + key: value for key, value in observation.items()}


def regroup(columns: Mapping[str, Any]) -> dict[str, Any]:
    """Nests ``observation.<key>`` / ``next_observation.<key>`` columns under one mapping each.

    Examples:
        >>> regroup({"observation.a": 1, "next_observation.a": 2, "reward": 3})
        {'observation': {'a': 1}, 'next_observation': {'a': 2}, 'reward': 3}
    """
    out: dict[str, Any] = {}
    for key, value in columns.items():
        for prefix in (PREFIX, NEXT_PREFIX):
            if key.startswith(prefix):
                out.setdefault(prefix[: -len(SEPARATOR)], {})[key[len(prefix) :]] = value
                break
        else:
            out[key] = value
    return out


def is_stored_observation(key: str) -> bool:
    """Whether a replay column holds an observation key (``observation.<key>``, next or not)."""
    return key.startswith((PREFIX, NEXT_PREFIX))
