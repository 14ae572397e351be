"""The zero-copy InsertRequest reader against the generated protobuf parser (no Ray, no gRPC)."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from replay.wire import experience_pb2 as pb
from replay.wire.batches import BatchError, check_insert
from replay.wire.codecs import encode_arrays
from replay.wire.reader import MAX_DIMS, MAX_EPISODES, MAX_TENSORS, parse_insert
from services.grpc.transitions import env_transition_spec
from tests.grpc_probe import transitions

SPEC = env_transition_spec("CartPole-v1")


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, wire_type: int, payload: bytes) -> bytes:
    head = varint(number << 3 | wire_type)
    return head + (varint(len(payload)) + payload if wire_type == 2 else payload)


def request(n: int = 16, seed: int = 0, **kwargs) -> pb.InsertRequest:
    batch = transitions(n, seed)
    ends = len(kwargs.get("episode_returns", ()))
    if ends:  # each reported episode ends in the batch
        batch["terminated"][-ends:] = True
    return pb.InsertRequest(
        writer_id=kwargs.pop("writer_id", "wire-test"),
        seq=kwargs.pop("seq", 3),
        tensors=[pb.Tensor(key=k, dtype=d, shape=s, data=b) for k, d, s, b in encode_arrays(batch)],
        **kwargs,
    )


def same(wire, message: pb.InsertRequest) -> None:
    assert wire.error is None
    assert (wire.writer_id, wire.seq) == (message.writer_id, message.seq)
    assert wire.episode_returns == list(message.episode_returns)
    assert wire.episode_lengths == list(message.episode_lengths)
    assert len(wire.tensors) == len(message.tensors)
    for ours, theirs in zip(wire.tensors, message.tensors, strict=True):
        assert (ours.key, ours.dtype, ours.shape) == (theirs.key, theirs.dtype, list(theirs.shape))
        assert bytes(ours.data) == theirs.data


def test_reads_what_protobuf_writes_and_views_the_data_in_place():
    message = request(episode_returns=[12.5, -3.0], episode_lengths=[12, 40])
    raw = message.SerializeToString()
    wire = parse_insert(raw)
    same(wire, message)
    observation = wire.tensors[0]
    assert isinstance(observation.data, memoryview) and observation.data.obj is raw  # no copy
    writer, arrays = check_insert(wire, SPEC, max_bytes=1 << 20)
    assert writer == "external/wire-test"
    np.testing.assert_array_equal(arrays["observation"], transitions(16)["observation"])
    assert not arrays["observation"].flags.writeable


def test_every_encoding_protobuf_accepts():
    # Negative int64s (ten-byte varints), unpacked repeated scalars, fields out of order, a
    # scalar given twice (the last wins), unknown fields of every wire type (skipped), and
    # concatenated messages (repeated fields append).
    tensor = pb.Tensor(key="reward", dtype="float32", shape=[2], data=b"\0" * 8)
    unpacked_shape = field(1, 2, b"reward") + field(2, 2, b"float32") + field(3, 0, varint(2))
    unknown = field(9, 0, varint(7)) + field(10, 1, b"\1" * 8) + field(11, 5, b"\2" * 4)
    unknown += field(12, 2, b"whatever")
    raw = b"".join(
        [
            field(2, 0, varint(-5)),
            field(3, 2, unpacked_shape + field(4, 2, b"\0" * 8) + unknown),
            field(1, 2, b"first"),
            field(4, 1, np.float64(1.5).tobytes()),
            field(4, 2, np.array([2.5, -1], "<f8").tobytes()),
            field(5, 0, varint(-1)),
            field(5, 2, varint(3) + varint(1 << 40)),
            unknown,
            field(1, 2, "zweite-\u00fc".encode()),
        ]
    )
    raw += request(2, writer_id="", seq=0).SerializeToString()  # merges: defaults change nothing
    message = pb.InsertRequest.FromString(raw)
    assert message.writer_id == "zweite-\u00fc" and message.seq == -5
    assert list(message.tensors[0].shape) == list(tensor.shape)
    same(parse_insert(raw), message)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\x0a\x05ab", "runs past the end"),
        (b"\x10\xff\xff", "varint"),
        (b"\x0a\x02\xc3\x28", "writer_id: not valid UTF-8"),
        (b"\x1b", "wire type 3"),
        (b"\x00\x00", "field number 0"),
        (field(4, 2, b"\0" * 7), "episode_returns"),
    ],
)
def test_malformed_messages_come_back_with_an_error(raw, why):
    wire = parse_insert(raw)
    assert wire.error is not None and why in wire.error
    with pytest.raises(BatchError, match=r"^message: not a valid InsertRequest"):
        check_insert(wire, SPEC, max_bytes=1 << 20)


def test_every_prefix_reads_as_protobuf_reads_it():
    raw = request(4, episode_returns=[1.0], episode_lengths=[4]).SerializeToString()
    for end in range(len(raw)):
        wire = parse_insert(raw[:end])  # never raises
        try:
            message = pb.InsertRequest.FromString(raw[:end])
        except DecodeError:
            assert wire.error is not None, end
        else:
            same(wire, message)


# -- bounded parsing: limits before per-element work, and a fuzzer ---------------------------
@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (field(3, 2, field(3, 2, varint(1) * (1 << 20))), "Tensor.shape: more than"),
        (field(3, 2, field(3, 0, varint(1)) * (MAX_DIMS + 1)), "Tensor.shape: more than"),
        (field(3, 2, b"") * (MAX_TENSORS + 1), "tensors: more than"),
        (field(4, 2, b"\0" * 8 * (MAX_EPISODES + 1)), "episode_returns: more than"),
        (field(5, 2, varint(1) * (MAX_EPISODES + 1)), "episode_lengths: more than"),
        (field(5, 2, b"") * 100_000, "InsertRequest: more than"),
        (field(9, 0, varint(1)) * 1_000_000, "InsertRequest: more than"),
        (field(3, 2, field(9, 2, b"") * 100_000), "Tensor: more than"),
        (field(1, 2, b"x" * (1 << 20)), "writer_id: longer than"),
        (field(3, 2, field(2, 2, b"f" * 4096)), "Tensor.dtype: longer than"),
    ],
    ids=[
        "packed-dims",
        "unpacked-dims",
        "tensors",
        "returns",
        "lengths",
        "empty-packed",
        "unknown-fields",
        "tensor-unknown-fields",
        "writer-id",
        "dtype",
    ],
)
def test_limits_refuse_before_walking_the_elements(raw, why):
    started = time.perf_counter()
    wire = parse_insert(raw)
    seconds = time.perf_counter() - started
    assert wire.error is not None and why in wire.error, wire.error
    # Bounded by the limits: a few tens of thousands of steps at most, whatever the size.
    assert seconds < 0.5, (why, seconds)


def test_the_largest_message_within_the_limits_reads_quickly():
    returns = np.zeros(MAX_EPISODES, "<f8").tobytes()
    lengths = varint(1) * MAX_EPISODES
    tensors = field(3, 2, field(1, 2, b"k") + field(3, 2, varint(2) * MAX_DIMS)) * MAX_TENSORS
    raw = tensors + field(4, 2, returns) + field(5, 2, lengths)
    started = time.perf_counter()
    wire = parse_insert(raw)
    assert wire.error is None and len(wire.episode_lengths) == MAX_EPISODES
    assert time.perf_counter() - started < 1.0


def mutations(rng: np.random.Generator, raw: bytes):
    data = bytearray(raw)
    for _ in range(int(rng.integers(1, 4))):
        kind = rng.integers(0, 4)
        pos = int(rng.integers(0, len(data) + 1))
        if kind == 0 and data:  # flip a byte
            data[min(pos, len(data) - 1)] = int(rng.integers(0, 256))
        elif kind == 1:  # insert random bytes
            data[pos:pos] = rng.bytes(int(rng.integers(1, 12)))
        elif kind == 2:  # cut
            del data[pos : pos + int(rng.integers(1, 12))]
        else:  # duplicate a slice
            data[pos:pos] = data[max(0, pos - 16) : pos]
    return bytes(data)


def test_fuzzed_messages_never_raise_and_read_as_protobuf_does():
    rng = np.random.default_rng(0)
    valid = request(3, episode_returns=[1.5, -2.0], episode_lengths=[3, 7]).SerializeToString()
    agreed = 0
    for case in range(3000):
        raw = rng.bytes(int(rng.integers(0, 64))) if case % 3 == 0 else mutations(rng, valid)
        wire = parse_insert(raw)  # never raises
        with contextlib.suppress(BatchError):  # refusals are BatchErrors only
            check_insert(wire, SPEC, max_bytes=1 << 20)
        try:
            message = pb.InsertRequest.FromString(raw)
        except DecodeError:
            continue  # protobuf refuses: we may refuse too (or read a string it finds invalid)
        assert wire.error is None, (raw, wire.error)  # what protobuf reads, we read (in limits)
        same(wire, message)
        agreed += 1
    assert agreed > 100  # the comparison ran on many readable mutants
