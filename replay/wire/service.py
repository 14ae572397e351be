"""The server side of ``relayrl.v1.Experience`` that the driver and every replay shard share.

Both the driver's gRPC server (``services.grpc``) and a replay shard serving direct writes
(:mod:`replay.intake`) answer Experience calls; what they must answer alike lives here, below
both: bearer-token authentication, the method handlers (Insert read by the zero-copy
:func:`replay.wire.reader.parse_insert`), receipts on the wire, deadlines, and the error that
says a run takes no more experience.
"""

from __future__ import annotations

import hmac

import grpc

from replay.wire import experience_pb2 as pb
from replay.wire.batches import ExternalReceipt
from replay.wire.reader import parse_insert

# How long an RPC waits for the driver (a checkpoint cut, counting, a held write) at most.
DRIVER_TIMEOUT_S = 600.0
# Calls that need no token: health checks (probes rarely carry credentials; they reveal nothing).
OPEN_METHODS = ("/grpc.health.v1.Health/",)


class IntakeClosed(RuntimeError):
    """External writes are no longer accepted (the run is stopping or has ended)."""


class TokenAuth(grpc.ServerInterceptor):
    """Refuses calls without ``authorization: Bearer <token>`` metadata (UNAUTHENTICATED).

    Args:
        token: The shared secret.
    """

    def __init__(self, token: str) -> None:
        self.expected = f"Bearer {token}".encode()

    def intercept_service(self, continuation, handler_call_details):
        """Passes authorized calls and health checks on; answers the rest UNAUTHENTICATED."""
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(OPEN_METHODS):
            return handler
        metadata = dict(handler_call_details.invocation_metadata or ())
        given = str(metadata.get("authorization", "")).encode()
        if hmac.compare_digest(given, self.expected):
            return handler
        reason = "missing" if not given else "wrong"
        return _refusal(handler, f"{reason} token: send 'authorization: Bearer <grpc.token>'")


def _refusal(handler, message: str):
    """A handler of the same kind as ``handler`` that aborts with UNAUTHENTICATED."""

    def deny(request, context):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    kind = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return kind(
        deny,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def receipt_message(receipt: ExternalReceipt) -> pb.WriteReceipt:
    """The wire form of a stored batch's receipt."""
    write = receipt.write
    return pb.WriteReceipt(
        shard_id=write.shard_id,
        writer_id=write.writer_id,
        seq=write.seq,
        items=write.num_items,
        write_count=write.write_count,
        duplicate=write.duplicate,
    )


def remaining_seconds(context) -> float:
    """Seconds left before the RPC's deadline (capped at ``DRIVER_TIMEOUT_S``)."""
    left = context.time_remaining()
    return DRIVER_TIMEOUT_S if left is None else max(0.0, min(left, DRIVER_TIMEOUT_S))


def experience_handler(servicer, methods=("Insert", "GetWeights", "GetRoute")):
    """``relayrl.v1.Experience``'s ``methods`` of ``servicer`` for ``grpc.Server``.

    As the generated ``add_ExperienceServicer_to_server``, except that Insert messages are
    read by :func:`replay.wire.reader.parse_insert`: tensor data stays a view into the received
    message (no second copy), and a malformed message is answered INVALID_ARGUMENT.
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
        handlers[name] = make(
            getattr(servicer, name),
            request_deserializer=deserialize,
            response_serializer=reply.SerializeToString,
        )
    return grpc.method_handlers_generic_handler("relayrl.v1.Experience", handlers)
