"""Who may call what on both gRPC servers: scoped credentials and the caller's identity.

Two credentials, both sent as ``authorization: Bearer <secret>`` metadata:

- the **operator** credential (``grpc.token``) may call everything;
- the **actor** credential (``grpc.actor_token``) may call what an external actor needs, the
  :data:`ACTOR_METHODS` (``Experience``'s Insert, GetWeights and GetRoute, and
  ``Control/GetStatus``); any other call with it is refused with PERMISSION_DENIED.

A call without a known credential is refused with UNAUTHENTICATED; health checks need none
(probes rarely carry credentials, and they reveal nothing). A server with no credential
configured (loopback only, see ``services.config.grpc``) installs no interceptor at all.

:func:`caller_identity` names the caller for writer leases (:mod:`replay.wire.leases`): a hash of
its credential, its TLS client certificate (mutual TLS) and the lease id a client may send as
``x-relayrl-lease`` metadata (:class:`services.grpc.client.RelayClient` sends a random one per
client), so actors that share a credential still own their writer ids apart. A caller with a
lease id or a client certificate is *distinct*: no other caller can pass for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac

import grpc

LEASE_METADATA = "x-relayrl-lease"
# Calls that need no credential.
OPEN_PREFIXES = ("/grpc.health.v1.Health/",)
# Marks the handlers :func:`refusal` makes.
REFUSAL = "relayrl_refusal"
# Calls the actor credential may make (every call is the operator's).
ACTOR_METHODS = frozenset(
    {
        "/relayrl.v1.Experience/Insert",
        "/relayrl.v1.Experience/GetWeights",
        "/relayrl.v1.Experience/GetRoute",
        "/relayrl.v1.Control/GetStatus",
    }
)


class ScopedAuth(grpc.ServerInterceptor):
    """Lets each call through only with a credential whose scope covers it (module docstring).

    Args:
        operator: The operator secret (everything).
        actor: The actor secret (:data:`ACTOR_METHODS`), or None.
    """

    def __init__(self, operator: str, actor: str | None = None) -> None:
        self.operator = f"Bearer {operator}".encode()
        self.actor = f"Bearer {actor}".encode() if actor else None

    def intercept_service(self, continuation, handler_call_details):
        """Passes calls the credential covers; answers the rest UNAUTHENTICATED or DENIED."""
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_PREFIXES):
            return handler
        metadata = dict(handler_call_details.invocation_metadata or ())
        given = str(metadata.get("authorization", "")).encode()
        if hmac.compare_digest(given, self.operator):
            return handler
        if self.actor is not None and hmac.compare_digest(given, self.actor):
            if method in ACTOR_METHODS:
                return handler
            return refusal(
                handler,
                grpc.StatusCode.PERMISSION_DENIED,
                f"{method} needs the operator credential (grpc.token); the actor credential "
                "(grpc.actor_token) may call Insert, GetWeights, GetRoute and GetStatus",
            )
        reason = "missing" if not given else "wrong"
        return refusal(
            handler,
            grpc.StatusCode.UNAUTHENTICATED,
            f"{reason} credential: send 'authorization: Bearer <grpc.token or grpc.actor_token>'",
        )


def is_refusal(handler) -> bool:
    """Whether ``handler`` is one :func:`refusal` made."""
    behavior = handler.stream_unary or handler.stream_stream
    return getattr(behavior, REFUSAL, False)


def refusal(handler, code: grpc.StatusCode, message: str, *, pool=None):
    """A handler for ``handler``'s call that aborts with ``code`` before reading its request.

    It takes the request as a stream, so the body is never awaited (a caller that withholds
    it holds nothing), and answers every kind of call alike: a status and no message.

    Args:
        handler: The handler the call would have had.
        code: The status.
        message: Its details.

    Keyword Args:
        pool: The threads that answer it (None: the server's).
    """

    def deny(request_iterator, context):
        context.abort(code, message)

    setattr(deny, REFUSAL, True)
    if pool is not None:
        deny.experimental_thread_pool = pool  # type: ignore[attr-defined]
    make = (
        grpc.stream_stream_rpc_method_handler
        if handler.response_streaming
        else grpc.stream_unary_rpc_method_handler
    )
    return make(
        deny,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


@dataclasses.dataclass(frozen=True)
class Caller:
    """Who made an RPC, as writer leases see it.

    Attributes:
        owner: A short hash of the credential, client certificate and lease id (the secret
            itself is never kept).
        distinct: Whether the call carried a lease id or a client certificate (callers that
            share a credential and send neither cannot be told apart).
        principal: A short hash of the credential and client certificate alone: what one
            secret's holder is, however many lease ids it makes up (its share of streams and
            leases is capped); empty for a caller with neither (no credential configured).
    """

    owner: str
    distinct: bool
    principal: str = ""


def caller_identity(context) -> Caller:
    """The :class:`Caller` of an RPC (its ``owner`` owns writer ids, see ``replay.wire.leases``)."""
    metadata = dict(context.invocation_metadata() or ())
    lease = str(metadata.get(LEASE_METADATA, ""))
    certificates = context.auth_context().get("x509_pem_cert", ())
    credential = str(metadata.get("authorization", ""))
    principal = hashlib.sha256(b"principal\0" + credential.encode() + b"\0")
    for certificate in certificates:
        principal.update(certificate + b"\0")
    digest = hashlib.sha256()
    for part in (credential, lease):
        digest.update(part.encode() + b"\0")
    for certificate in certificates:
        digest.update(certificate + b"\0")
    named = bool(credential or certificates)
    return Caller(
        digest.hexdigest()[:16],
        bool(lease or certificates),
        principal.hexdigest()[:16] if named else "",
    )
