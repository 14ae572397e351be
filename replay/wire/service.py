"""The server side of ``relayrl.v1.Experience`` that the driver and every replay shard share.

Both the driver's gRPC server (``services.grpc``) and a replay shard serving direct writes
(:mod:`replay.intake`) answer Experience calls; what they must answer alike lives here, below
both: the method handlers (Insert read by the zero-copy :func:`replay.wire.reader.parse_insert`,
its streams capped by :class:`replay.wire.transport.StreamSlots`), the admission of each batch
(:class:`Admission`: the batch checks, a recurrent run's sequence checks
(:mod:`replay.wire.sequences`), then the writer's lease), the status each refusal is answered
with, receipts on the wire, deadlines, and the error that says a run takes no more experience.
Credentials are :mod:`replay.wire.auth`'s, TLS and limits :mod:`replay.wire.transport`'s.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import NoReturn

import grpc
import numpy as np

from replay.wire import experience_pb2 as pb
from replay.wire.auth import Caller
from replay.wire.batches import (
    WRITER_PREFIX,
    BatchError,
    ExternalReceipt,
    TransitionSpec,
    check_insert,
)
from replay.wire.leases import Refused, WriterLeases, scoped_writer
from replay.wire.reader import parse_insert
from replay.wire.sequences import SequenceSpec, check_sequences
from replay.wire.transport import StreamSlots

# How long an RPC waits for the driver (a checkpoint cut, counting, a held write) at most.
DRIVER_TIMEOUT_S = 600.0


class IntakeClosed(RuntimeError):
    """External writes are no longer accepted (the run is stopping or has ended)."""


class Admission:
    """Lets a batch in: checks it against the run's spec, then its writer's lease.

    Args:
        spec: The run's transition spec.
        leases: The server's lease book.

    Keyword Args:
        max_bytes: Largest batch.
        clip_actions: Clip Box actions into the action space instead of refusing them.
        max_version: The newest published policy version a batch may name, given the highest
            it names (a shard may wait a moment to hear of it); None: unchecked.
    """

    def __init__(
        self,
        spec: TransitionSpec,
        leases: WriterLeases,
        *,
        max_bytes: int,
        clip_actions: bool = False,
        max_version: Callable[[int], int] | None = None,
    ) -> None:
        self.spec = spec
        self.leases = leases
        self.max_bytes = max_bytes
        self.clip_actions = clip_actions
        self.max_version = max_version

    def check(self, request, caller: Caller) -> tuple[str, dict[str, np.ndarray], int]:
        """The replay writer (scoped to ``caller``), arrays and frames of ``request``.

        The writer is :func:`replay.wire.leases.scoped_writer`'s: the driver and every shard
        name a caller's writer alike, and no caller can write another's. A transition is one
        frame; a run's sequences (:class:`replay.wire.sequences.SequenceSpec`) are checked by
        :func:`replay.wire.sequences.check_sequences` too and count their new steps (the
        arrays returned are the stored ones, without ``new_steps``).

        Raises:
            BatchError: A batch the spec or a field check refuses (nothing is stored).
            replay.wire.leases.Refused: The lease refuses it.
        """
        max_version = None
        if self.max_version is not None:
            named = _highest_version(request)
            max_version = self.max_version(named) if named is not None else None
        writer, arrays = check_insert(
            request,
            self.spec,
            max_bytes=self.max_bytes,
            max_version=max_version,
            clip_actions=self.clip_actions,
        )
        if isinstance(self.spec, SequenceSpec):
            arrays, frames = check_sequences(arrays, self.spec)
        else:
            frames = len(next(iter(arrays.values())))
        writer = scoped_writer(writer, caller.owner)
        self.leases.admit(
            writer,
            request.seq,
            owner=caller.owner,
            frames=frames,
            anchored=not caller.distinct,
            principal=caller.principal or caller.owner,
        )
        return writer, arrays, frames


def _highest_version(request) -> int | None:
    """The highest ``policy_version`` a well-formed request names (None: none or malformed)."""
    if getattr(request, "error", None) is not None:
        return None
    for tensor in request.tensors:
        if tensor.key == "policy_version" and tensor.dtype == "int64" and len(tensor.data) >= 8:
            if len(tensor.data) % 8:
                return None
            return int(np.frombuffer(tensor.data, dtype="<i8").max())
    return None


def refusal_status(err: Exception) -> grpc.StatusCode | None:
    """The status a refused Insert is answered with (None: not a refusal)."""
    if isinstance(err, BatchError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(err, Refused):
        return grpc.StatusCode[err.code]
    if isinstance(err, IntakeClosed):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(err, TimeoutError | concurrent.futures.TimeoutError):
        return grpc.StatusCode.DEADLINE_EXCEEDED
    return None


def abort_refused(context, err: Exception) -> NoReturn:
    """Answers an Insert with the status of its refusal ``err`` (re-raises any other error)."""
    code = refusal_status(err)
    if code is None:
        raise err
    context.abort(code, refusal_message(err))
    raise AssertionError("context.abort returns by raising")  # pragma: no cover


def refusal_message(err: Exception) -> str:
    """The details a refused Insert is answered with."""
    if isinstance(err, TimeoutError | concurrent.futures.TimeoutError):
        return f"insert timed out: {err}"
    return str(err)


def receipt_message(receipt: ExternalReceipt) -> pb.WriteReceipt:
    """The wire form of a stored batch's receipt (the writer as the client named it)."""
    write = receipt.write
    return pb.WriteReceipt(
        shard_id=write.shard_id,
        writer_id=WRITER_PREFIX + receipt.writer_id,
        seq=write.seq,
        items=write.num_items,
        write_count=write.write_count,
        duplicate=write.duplicate,
    )


def remaining_seconds(context) -> float:
    """Seconds left before the RPC's deadline (capped at ``DRIVER_TIMEOUT_S``)."""
    left = context.time_remaining()
    return DRIVER_TIMEOUT_S if left is None else max(0.0, min(left, DRIVER_TIMEOUT_S))


def experience_handler(
    servicer, methods=("Insert", "GetWeights", "GetRoute"), *, slots: StreamSlots | None = None
):
    """``relayrl.v1.Experience``'s ``methods`` of ``servicer`` for ``grpc.Server``.

    As the generated ``add_ExperienceServicer_to_server``, except that Insert messages are
    read by :func:`replay.wire.reader.parse_insert`: tensor data stays a view into the received
    message (no second copy), and a malformed message is answered INVALID_ARGUMENT; with
    ``slots``, Insert streams are capped and idle ones cancelled.
    """
    kinds = {
        "Insert": (grpc.stream_unary_rpc_method_handler, parse_insert, pb.InsertReply),
        "GetWeights": (
            grpc.unary_stream_rpc_method_handler,
            pb.GetWeightsRequest.FromString,
            pb.WeightsChunk,
        ),
        "GetRoute": (grpc.unary_unary_rpc_method_handler, pb.GetRouteRequest.FromString, pb.Route),
    }
    handlers = {}
    for name in methods:
        make, deserialize, reply = kinds[name]
        behavior = getattr(servicer, name)
        if name == "Insert" and slots is not None:
            behavior = slots.guard(behavior)
        handlers[name] = make(
            behavior,
            request_deserializer=deserialize,
            response_serializer=reply.SerializeToString,
        )
    return grpc.method_handlers_generic_handler("relayrl.v1.Experience", handlers)
