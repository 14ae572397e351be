"""Experience from actors outside Ray: the run's transition spec, batch checks, tensor codecs.

An external actor (a game server, a robot, a program in another language) sends transitions as
named tensors: key, numpy dtype name, shape, raw little-endian C-order bytes. The driver's gRPC
server checks every batch against the run's :class:`TransitionSpec` (the keys, dtypes and
per-item shapes collectors write, derived once from the env's spaces) before anything is
stored, and views the bytes as arrays without copying (``numpy.frombuffer``).

Weights travel the other way as the same tensor descriptions plus one blob of their bytes.
This module is pure (numpy, gymnasium): the server and the client both use it.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence

import gymnasium as gym
import numpy as np

from replay.receipts import WriteReceipt

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
# A writer's batches take turns over the shards in runs of this many sequence numbers.
ROUTE_GROUP = 8


class BatchError(ValueError):
    """A batch that does not match the run's transition spec; the message names the key."""


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
    """

    tensors: Mapping[str, TensorSpec]
    num_actions: int | None = None

    def describe(self) -> str:
        """``observation f32[4], action i64[], ...`` for messages and logs."""
        return ", ".join(f"{k} {s.dtype}{list(s.shape)}" for k, s in self.tensors.items())


def transition_spec(
    observation_space: gym.spaces.Space, action_space: gym.spaces.Space
) -> TransitionSpec:
    """The transitions a collector writes for these spaces (see ``collector.nstep``).

    Observations keep the space's dtype and shape; discrete actions are int64 scalars (what the
    epsilon-greedy policy returns), Box actions float32 of the space's shape; rewards and
    n-step discounts are float32, the episode flags bool, the policy version int64.

    Raises:
        ValueError: For a space that collectors cannot store (not Box or Discrete).
    """
    if not isinstance(observation_space, gym.spaces.Box):
        raise ValueError(f"observation space {observation_space} is not a Box")
    observation = TensorSpec(np.dtype(observation_space.dtype).name, observation_space.shape)
    if isinstance(action_space, gym.spaces.Discrete):
        action, num_actions = TensorSpec("int64", ()), int(action_space.n)
    elif isinstance(action_space, gym.spaces.Box):
        action, num_actions = TensorSpec("float32", action_space.shape), None
    else:
        raise ValueError(f"action space {action_space} is neither Discrete nor Box")
    scalar = ()
    tensors = {
        "observation": observation,
        "action": action,
        "reward": TensorSpec("float32", scalar),
        "next_observation": observation,
        "terminated": TensorSpec("bool", scalar),
        "truncated": TensorSpec("bool", scalar),
        "n_step_discount": TensorSpec("float32", scalar),
        "policy_version": TensorSpec("int64", scalar),
    }
    return TransitionSpec(tensors, num_actions)


@dataclasses.dataclass(frozen=True)
class ExternalReceipt:
    """One external batch stored in replay; the driver counts its frames like a rollout's.

    Attributes:
        writer_id: The client's writer id (stored as ``external/<writer_id>``).
        seq: The client's batch number.
        frames: Transitions stored (0 for a retried batch).
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
            f"writer_id: must be 1-{MAX_WRITER_ID} printable characters, got {writer_id!r}"
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
            raise BatchError(f"key {key!r}: not in the run's transition spec ({spec.describe()})")
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
            raise BatchError(f"key {key!r}: unknown dtype {tensor.dtype!r}; accepted: {DTYPES}")
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


def check_insert(
    request, spec: TransitionSpec, *, max_bytes: int
) -> tuple[str, dict[str, np.ndarray]]:
    """Checks one ``InsertRequest`` (generated or :class:`replay.wire.reader.WireInsert`).

    Returns:
        The replay writer id and the batch's arrays (views of the message).

    Raises:
        BatchError: Naming the field or key: an unreadable message, a bad ``writer_id`` or
            ``seq``, any of :func:`decode_batch`'s refusals, episode lists of unequal length.
    """
    error = getattr(request, "error", None)
    if error is not None:
        raise BatchError(f"message: not a valid InsertRequest: {error}")
    writer = check_writer(request.writer_id, request.seq)
    arrays = decode_batch(request.tensors, spec, max_bytes=max_bytes)
    if len(request.episode_returns) != len(request.episode_lengths):
        raise BatchError(
            "episode_lengths: one length per episode return, got "
            f"{len(request.episode_lengths)} for {len(request.episode_returns)}"
        )
    return writer, arrays


def encode_arrays(arrays: Mapping[str, np.ndarray]) -> list[tuple[str, str, list[int], bytes]]:
    """``(key, dtype, shape, bytes)`` per array, little-endian C order (a client's half)."""
    out = []
    for key, value in arrays.items():
        array = np.asarray(value)
        if array.dtype.name not in DTYPES:
            raise BatchError(f"key {key!r}: dtype {array.dtype} cannot be sent; accepted: {DTYPES}")
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        out.append((key, array.dtype.name, list(array.shape), array.tobytes()))
    return out


def encode_state_dict(state_dict: Mapping) -> tuple[list[tuple[str, str, list[int]]], bytes]:
    """Weights as ``([(key, dtype, shape), ...], blob)``: the tensors' bytes concatenated."""
    metas, parts = [], []
    for key, tensor in state_dict.items():
        array = np.ascontiguousarray(tensor.detach().cpu().numpy())
        metas.append((key, array.dtype.name, list(array.shape)))
        parts.append(array.tobytes())
    return metas, b"".join(parts)


def decode_state_dict(metas: Iterable, blob: bytearray) -> dict:
    """Torch tensors from :func:`encode_state_dict`'s parts (``metas`` have key/dtype/shape).

    Raises:
        BatchError: If the blob's size does not match the tensors.
    """
    import torch

    state, offset = {}, 0
    for meta in metas:
        dtype = np.dtype(meta.dtype).newbyteorder("<")
        count = math.prod(meta.shape)
        end = offset + count * dtype.itemsize
        if end > len(blob):
            raise BatchError(f"key {meta.key!r}: the weights blob is truncated")
        array = np.frombuffer(blob, dtype=dtype, count=count, offset=offset)
        state[meta.key] = torch.from_numpy(array.reshape(tuple(meta.shape)))
        offset = end
    if offset != len(blob):
        raise BatchError(f"weights blob has {len(blob) - offset} bytes beyond its tensors")
    return state
