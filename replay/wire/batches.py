"""Experience from actors outside Ray: the run's transition spec and the checks of every batch.

An external actor (a game server, a robot, a program in another language) sends transitions as
named tensors: key, numpy dtype name, shape, raw little-endian C-order bytes
(:mod:`replay.wire.codecs`). The driver's gRPC server and every shard serving direct writes
check each batch against the run's :class:`TransitionSpec` (the keys, dtypes and per-item shapes
collectors write, derived once from the env's spaces) before anything is stored, and view the
bytes as arrays without copying (``numpy.frombuffer``). Every field that carries meaning is
range-checked (:func:`check_meaning`, :func:`check_episodes`: finite returns, lengths >= 1,
discounts in [0, 1], actions in the action space, no policy version from the future), and an
error message echoes a client's strings cut short (:func:`shown`).

This module is pure (numpy, gymnasium): the servers and the client use it.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np

from replay.receipts import WriteReceipt
from replay.wire.episodes import check_episodes, check_episodes_proven
from replay.wire.errors import BatchError

# numpy dtype names a tensor may carry on the wire.
DTYPES = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
WRITER_PREFIX = "external/"
MAX_WRITER_ID = 128
# Echoed strings (writer ids, keys, dtypes) are cut to this many characters in error messages.
MAX_ECHO = 40
# Box actions may exceed their bounds by this much (float32 rounding of a squashed policy).
ACTION_TOLERANCE = 1e-5
# A writer's batches take turns over the shards in runs of this many sequence numbers.
ROUTE_GROUP = 8


def shown(text: str, limit: int = MAX_ECHO) -> str:
    """``text`` as an error message echoes it: quoted, cut to ``limit`` characters.

    Examples:
        >>> shown("robot-1"), shown("x" * 100, limit=8)
        ("'robot-1'", "'xxxxxxxx'... (100 characters)")
    """
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """What one key holds per transition.

    Attributes:
        dtype: numpy dtype name.
        shape: Per-item shape (without the batch dimension).
    """

    dtype: str
    shape: tuple[int, ...]

    @property
    def itemsize(self) -> int:
        """Bytes of one item."""
        return np.dtype(self.dtype).itemsize * math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class TransitionSpec:
    """The keys, dtypes and per-item shapes of a run's stored transitions.

    Attributes:
        tensors: Key to :class:`TensorSpec`, in the order collectors write them.
        num_actions: Discrete action count (actions must lie in ``[0, num_actions)``), or None.
        action_low: Box actions: the lower bound of each element (flattened), or None.
        action_high: Box actions: the upper bound of each element (flattened), or None.
    """

    tensors: Mapping[str, TensorSpec]
    num_actions: int | None = None
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None

    def describe(self) -> str:
        """``observation f32[4], action i64[], ...`` for messages and logs."""
        return ", ".join(f"{k} {s.dtype}{list(s.shape)}" for k, s in self.tensors.items())


def transition_spec(
    observation_space: gym.spaces.Space, action_space: gym.spaces.Space
) -> TransitionSpec:
    """The transitions a collector writes for these spaces (see ``collector.nstep``).

    Observations keep the space's dtype and shape; discrete actions are int64 scalars (what the
    epsilon-greedy policy returns), Box actions float32 of the space's shape; rewards and
    n-step discounts are float32, the episode flags bool, the policy version int64. A flat
    ``Dict`` observation (a ``Dict``/``Tuple`` flattened by key path, ``collector.envs.spaces``)
    is one named field per key: ``observation.<key>`` and ``next_observation.<key>``.

    Raises:
        ValueError: For a space that collectors cannot store (not Box or Discrete).
    """
    if isinstance(observation_space, gym.spaces.Dict):
        keyed = {key: _leaf_spec(key, space) for key, space in observation_space.spaces.items()}
    elif not isinstance(observation_space, gym.spaces.Box):
        raise ValueError(f"observation space {observation_space} is not a Box")
    else:
        keyed = None
        observation = TensorSpec(np.dtype(observation_space.dtype).name, observation_space.shape)
    if isinstance(action_space, gym.spaces.Discrete):
        action, num_actions = TensorSpec("int64", ()), int(action_space.n)
    elif isinstance(action_space, gym.spaces.Box):
        action, num_actions = TensorSpec("float32", action_space.shape), None
    else:
        raise ValueError(f"action space {action_space} is neither Discrete nor Box")
    bounds = {}
    if isinstance(action_space, gym.spaces.Box):
        bounds = {
            "action_low": tuple(float(x) for x in np.ravel(action_space.low)),
            "action_high": tuple(float(x) for x in np.ravel(action_space.high)),
        }
    scalar = ()
    if keyed is not None:
        tensors = {f"observation.{key}": spec for key, spec in keyed.items()}
        tensors |= {"action": action, "reward": TensorSpec("float32", scalar)}
        tensors |= {f"next_observation.{key}": spec for key, spec in keyed.items()}
    else:
        tensors = {
            "observation": observation,
            "action": action,
            "reward": TensorSpec("float32", scalar),
            "next_observation": observation,
        }
    tensors |= {
        "terminated": TensorSpec("bool", scalar),
        "truncated": TensorSpec("bool", scalar),
        "n_step_discount": TensorSpec("float32", scalar),
        "policy_version": TensorSpec("int64", scalar),
    }
    return TransitionSpec(tensors, num_actions, **bounds)


def _leaf_spec(key: str, space: gym.spaces.Space) -> TensorSpec:
    """One key of a flat ``Dict`` observation (its space's dtype and shape)."""
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple) or space.dtype is None:
        raise ValueError(f"observation key {key!r}: {space} is not flattened")
    return TensorSpec(np.dtype(space.dtype).name, tuple(int(x) for x in space.shape))


@dataclasses.dataclass(frozen=True)
class ExternalReceipt:
    """One external batch stored in replay; the driver counts its frames like a rollout's.

    Attributes:
        writer_id: The client's writer id (stored as ``external/<writer_id>``).
        seq: The client's batch number.
        frames: Transitions stored, or the new steps of the sequences stored
            (:mod:`replay.wire.sequences`); 0 for a retried batch.
        episode_returns: Returns of episodes the client reported finished in this batch.
        episode_lengths: Their lengths.
        write: The replay shard's receipt.
    """

    writer_id: str
    seq: int
    frames: int
    episode_returns: tuple[float, ...]
    episode_lengths: tuple[int, ...]
    write: WriteReceipt


def shard_of(writer: str, seq: int, num_shards: int) -> int:
    """The shard that stores (and deduplicates) batch ``seq`` of replay writer ``writer``.

    A writer's batches take turns over every shard in runs of :data:`ROUTE_GROUP`, and a
    retried ``(writer, seq)`` meets the shard that stored it (``writer`` is the replay writer
    id, ``external/<client writer id>``).
    """
    return (zlib.crc32(writer.encode()) + seq // ROUTE_GROUP) % num_shards


def check_writer(writer_id: str, seq: int) -> str:
    """Validates a batch's writer id and sequence number; returns the replay writer id.

    Raises:
        BatchError: Naming ``writer_id`` or ``seq``.
    """
    if not writer_id or len(writer_id) > MAX_WRITER_ID or not writer_id.isprintable():
        raise BatchError(
            f"writer_id: must be 1-{MAX_WRITER_ID} printable characters, got {shown(writer_id)}"
        )
    if seq < 0:
        raise BatchError(f"seq: must be >= 0, got {seq}")
    return WRITER_PREFIX + writer_id


def decode_batch(
    tensors: Sequence, spec: TransitionSpec, *, max_bytes: int
) -> dict[str, np.ndarray]:
    """Checks named tensors against ``spec`` and views them as arrays (no copy).

    Args:
        tensors: Objects with ``key``, ``dtype``, ``shape`` and ``data`` (protobuf ``Tensor``).
        spec: The run's transition spec.
        max_bytes: Largest batch (sum of the tensors' bytes).

    Returns:
        Key to read-only array ``[batch, *item_shape]``.

    Raises:
        BatchError: Naming the key: unknown, repeated or missing key, unknown or wrong dtype,
            wrong shape or byte count, batch sizes that differ, a batch over ``max_bytes``,
            NaN or infinite floats, actions out of range.
    """
    arrays: dict[str, np.ndarray] = {}
    total = 0
    for tensor in tensors:
        key = tensor.key
        expected = spec.tensors.get(key)
        if expected is None:
            raise BatchError(
                f"key {shown(key)}: not in the run's transition spec ({spec.describe()})"
            )
        if key in arrays:
            raise BatchError(f"key {key!r}: given twice")
        data = tensor.data
        total += len(data)
        if total > max_bytes:
            raise BatchError(
                f"key {key!r}: the batch exceeds the limit of {max_bytes} bytes "
                "(grpc.max_message_mb); send smaller batches"
            )
        if tensor.dtype not in DTYPES:
            raise BatchError(
                f"key {key!r}: unknown dtype {shown(tensor.dtype)}; accepted: {DTYPES}"
            )
        if tensor.dtype != expected.dtype:
            raise BatchError(f"key {key!r}: dtype {tensor.dtype}, the run stores {expected.dtype}")
        shape = tuple(tensor.shape)
        if len(shape) != 1 + len(expected.shape) or shape[1:] != expected.shape or shape[0] < 1:
            raise BatchError(
                f"key {key!r}: shape {list(shape)}, the run stores [batch >= 1]"
                f"+{list(expected.shape)}"
            )
        if len(data) != shape[0] * expected.itemsize:
            raise BatchError(
                f"key {key!r}: {len(data)} bytes, shape {list(shape)} needs "
                f"{shape[0] * expected.itemsize}"
            )
        arrays[key] = np.frombuffer(data, dtype=np.dtype(tensor.dtype).newbyteorder("<")).reshape(
            shape
        )
    missing = [key for key in spec.tensors if key not in arrays]
    if missing:
        raise BatchError(f"key {missing[0]!r}: missing from the batch ({spec.describe()})")
    sizes = {len(a) for a in arrays.values()}
    if len(sizes) != 1:
        first = next(iter(spec.tensors))
        odd = next(k for k, a in arrays.items() if len(a) != len(arrays[first]))
        raise BatchError(
            f"key {odd!r}: {len(arrays[odd])} items, key {first!r} has {len(arrays[first])}"
        )
    for key, array in arrays.items():
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            raise BatchError(f"key {key!r}: {bad} NaN or infinite values")
    if spec.num_actions is not None:
        action = arrays["action"]
        if action.min() < 0 or action.max() >= spec.num_actions:
            raise BatchError(f"key 'action': actions must lie in [0, {spec.num_actions})")
    return arrays


def check_meaning(
    arrays: dict[str, np.ndarray],
    spec: TransitionSpec,
    *,
    max_version: int | None = None,
    clip_actions: bool = False,
) -> dict[str, np.ndarray]:
    """Range checks on the keys that carry meaning (after :func:`decode_batch`).

    ``n_step_discount`` must lie in [0, 1]; Box actions inside the action space (with
    ``clip_actions``: clipped into it, a copy); ``policy_version`` in [-1, ``max_version``]
    (-1: acted before any weights; ``max_version``: the newest published, at least 0; None:
    unchecked).

    Returns:
        ``arrays``, with ``action`` replaced by its clipped copy when clipping changed it.

    Raises:
        BatchError: Naming the key.
    """
    discount = arrays.get("n_step_discount")
    if discount is not None and (discount.min() < 0 or discount.max() > 1):
        raise BatchError("key 'n_step_discount': must lie in [0, 1]")
    if spec.action_low is not None and "action" in arrays:
        action = arrays["action"]
        low = np.asarray(spec.action_low, dtype=np.float64)
        high = np.asarray(spec.action_high, dtype=np.float64)
        flat = action.reshape(-1, low.size)  # one row per action (a sequence holds several)
        outside = (flat < low - ACTION_TOLERANCE) | (flat > high + ACTION_TOLERANCE)
        if outside.any():
            if not clip_actions:
                raise BatchError(
                    f"key 'action': {int(outside.sum())} values outside the action space "
                    "(send actions inside it, or set grpc.clip_actions: true)"
                )
            clipped = np.clip(flat, low, high).astype(action.dtype).reshape(action.shape)
            arrays = {**arrays, "action": clipped}
    version = arrays.get("policy_version")
    if version is not None and len(version):
        if version.min() < -1:
            raise BatchError("key 'policy_version': must be >= -1 (-1: no weights yet)")
        if max_version is not None and version.max() > max_version:
            raise BatchError(
                f"key 'policy_version': {int(version.max())} is above the newest published "
                f"version {max_version}"
            )
    return arrays


def check_insert(
    request,
    spec: TransitionSpec,
    *,
    max_bytes: int,
    max_version: int | None = None,
    clip_actions: bool = False,
) -> tuple[str, dict[str, np.ndarray]]:
    """Checks one ``InsertRequest`` (generated or :class:`replay.wire.reader.WireInsert`).

    Args:
        request: The message.
        spec: The run's transition spec.
        max_bytes: Largest batch.
        max_version: The newest published policy version (see :func:`check_meaning`).
        clip_actions: Clip Box actions into the action space instead of refusing them.

    Returns:
        The replay writer id and the batch's arrays (views of the message).

    Raises:
        BatchError: Naming the field or key: an unreadable message, a bad ``writer_id`` or
            ``seq``, any of :func:`decode_batch`'s, :func:`check_meaning`'s,
            :func:`check_episodes`' and :func:`check_episodes_proven`'s refusals.
    """
    error = getattr(request, "error", None)
    if error is not None:
        raise BatchError(f"message: not a valid InsertRequest: {error}")
    writer = check_writer(request.writer_id, request.seq)
    check_episodes(request.episode_returns, request.episode_lengths)
    arrays = decode_batch(request.tensors, spec, max_bytes=max_bytes)
    arrays = check_meaning(arrays, spec, max_version=max_version, clip_actions=clip_actions)
    check_episodes_proven(request.episode_returns, arrays)
    return writer, arrays
