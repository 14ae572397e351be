"""A zero-copy reader of ``relayrl.v1.InsertRequest`` (the protobuf wire format).

gRPC hands a server each Insert message as one ``bytes`` object. The generated protobuf class
would parse it and copy every tensor's ``data`` again into a new ``bytes`` object when it is
read: a second pass over megabytes per batch, on a path that is bound by memory bandwidth. This
reader walks the wire format instead and gives each tensor's ``data`` as a ``memoryview`` into
the message, so the only copy a server makes is the one into its replay table.

It reads every encoding the protobuf spec allows for these fields (packed and unpacked repeated
scalars, fields in any order, a field given twice: the last scalar wins, repeated ones append),
skips unknown fields like protobuf does, and never raises: a malformed message comes back with
``error`` set, which the servers answer with INVALID_ARGUMENT.

**Bounded work.** A message comes from the network, so what reading it may cost is bounded by
limits, not by its size: at most :data:`MAX_TENSORS` tensors per batch, :data:`MAX_DIMS` dims
per tensor, :data:`MAX_EPISODES` episode returns and lengths per batch, :data:`MAX_OTHER_FIELDS`
other fields (scalars given again, unknown fields) per message, and :data:`MAX_NAME_BYTES` bytes
per string. Each limit is checked before the per-element work it bounds (a packed field's
length before its items are walked, a string's length before it is decoded), so refusing a
hostile message costs time proportional to the limits; tensor data is never walked at all.
"""

from __future__ import annotations

import dataclasses
import struct

_DOUBLE = struct.Struct("<d")
_VARINT_BYTES = 10  # the longest varint

MAX_TENSORS = 64
MAX_DIMS = 8
MAX_EPISODES = 1 << 16
MAX_OTHER_FIELDS = 64
MAX_NAME_BYTES = 512


class WireError(ValueError):
    """The bytes are not a valid ``InsertRequest``."""


@dataclasses.dataclass
class WireTensor:
    """One ``relayrl.v1.Tensor``; ``data`` is a read-only view into the message."""

    key: str = ""
    dtype: str = ""
    shape: list[int] = dataclasses.field(default_factory=list)
    data: memoryview | bytes = b""


@dataclasses.dataclass
class WireInsert:
    """One ``relayrl.v1.InsertRequest`` (attribute names as in the generated class).

    Attributes:
        error: Why the message could not be read (None when it could).
    """

    writer_id: str = ""
    seq: int = 0
    tensors: list[WireTensor] = dataclasses.field(default_factory=list)
    episode_returns: list[float] = dataclasses.field(default_factory=list)
    episode_lengths: list[int] = dataclasses.field(default_factory=list)
    error: str | None = None


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            break
    raise WireError("a varint is truncated or too long")


def _int64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _fields(buf: memoryview, pos: int, end: int):
    """Yields ``(field number, wire type, value)``; length-delimited values as (start, stop)."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire_type == 0:
            value, pos = _varint(buf, pos, end)
        elif wire_type == 1:
            value, pos = (pos, pos + 8), pos + 8
        elif wire_type == 2:
            length, pos = _varint(buf, pos, end)
            value, pos = (pos, pos + length), pos + length
        elif wire_type == 5:
            value, pos = (pos, pos + 4), pos + 4
        else:
            raise WireError(f"field {number}: wire type {wire_type} is not used by relayrl.v1")
        if pos > end:
            raise WireError(f"field {number} runs past the end of its message")
        yield number, wire_type, value


def _text(buf: memoryview, span: tuple[int, int], name: str) -> str:
    if span[1] - span[0] > MAX_NAME_BYTES:  # before decoding
        raise WireError(f"{name}: longer than {MAX_NAME_BYTES} bytes ({span[1] - span[0]})")
    try:
        return str(buf[span[0] : span[1]], "utf-8")
    except UnicodeDecodeError as err:
        raise WireError(f"{name}: not valid UTF-8") from err


def _varints(buf: memoryview, wire_type: int, value, out: list[int], limit: int, name: str) -> None:
    """Appends a repeated varint field's items to ``out``, refusing more than ``limit`` in all."""
    if wire_type == 0:
        if len(out) >= limit:
            raise WireError(f"{name}: more than {limit} items")
        out.append(_int64(value))
    elif wire_type == 2:
        pos, end = value
        if end - pos > (limit - len(out)) * _VARINT_BYTES:  # before walking any item
            raise WireError(f"{name}: more than {limit} items")
        while pos < end:
            if len(out) >= limit:
                raise WireError(f"{name}: more than {limit} items")
            item, pos = _varint(buf, pos, end)
            out.append(_int64(item))


class _Budget:
    """Counts the fields of one message that no other limit bounds."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.left = MAX_OTHER_FIELDS

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise WireError(
                f"{self.name}: more than {MAX_OTHER_FIELDS} repeated scalar or unknown fields"
            )


def _tensor(buf: memoryview, start: int, end: int) -> WireTensor:
    tensor = WireTensor()
    budget = _Budget("Tensor")
    for number, wire_type, value in _fields(buf, start, end):
        if number == 3 and wire_type in (0, 2):
            _varints(buf, wire_type, value, tensor.shape, MAX_DIMS, "Tensor.shape")
            if wire_type == 2 and value[0] == value[1]:  # an empty packed field adds nothing
                budget.spend()
            continue
        budget.spend()
        if number == 1 and wire_type == 2:
            tensor.key = _text(buf, value, "Tensor.key")
        elif number == 2 and wire_type == 2:
            tensor.dtype = _text(buf, value, "Tensor.dtype")
        elif number == 4 and wire_type == 2:
            tensor.data = buf[value[0] : value[1]]
    return tensor


def parse_insert(message: bytes) -> WireInsert:
    """Reads an ``InsertRequest`` without copying tensor data (see the module docstring)."""
    request = WireInsert()
    buf = memoryview(message).toreadonly()
    budget = _Budget("InsertRequest")
    returns = request.episode_returns
    try:
        for number, wire_type, value in _fields(buf, 0, len(buf)):
            if number == 3 and wire_type == 2:
                if len(request.tensors) >= MAX_TENSORS:
                    raise WireError(f"tensors: more than {MAX_TENSORS} in one batch")
                request.tensors.append(_tensor(buf, *value))
            elif number == 4 and wire_type in (1, 2):
                start, stop = value
                if start == stop:  # an empty packed field adds nothing
                    budget.spend()
                if (stop - start) % 8:
                    raise WireError("episode_returns: packed doubles of odd length")
                if len(returns) + (stop - start) // 8 > MAX_EPISODES:  # before unpacking
                    raise WireError(f"episode_returns: more than {MAX_EPISODES} in one batch")
                returns.extend(item for (item,) in _DOUBLE.iter_unpack(buf[start:stop]))
            elif number == 5 and wire_type in (0, 2):
                _varints(
                    buf, wire_type, value, request.episode_lengths, MAX_EPISODES, "episode_lengths"
                )
                if wire_type == 2 and value[0] == value[1]:
                    budget.spend()
            else:
                budget.spend()
                if number == 1 and wire_type == 2:
                    request.writer_id = _text(buf, value, "writer_id")
                elif number == 2 and wire_type == 0:
                    request.seq = _int64(value)
    except WireError as err:
        request.error = str(err)
    return request
