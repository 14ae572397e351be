"""How both gRPC servers face the network: TLS, limits, keepalive, and fair use of their threads.

The driver's server (``services.grpc.server``) and every replay shard serving direct writes
(:mod:`replay.intake`) are built here alike:

- **TLS** (:class:`ServerTls`): a certificate chain and key, and with a client CA mutual TLS
  (clients must present a certificate that CA signed). The PEM bytes travel to the shards, so a
  shard on another node needs no files of its own. Without TLS a server listens in plaintext,
  which the config allows only on loopback or with ``grpc.allow_plaintext``.
- **Limits** (:func:`make_server`): message sizes twice the batch limit (so an oversized batch
  still reaches the check that names it), keepalive pings that find dead peers, and a maximum
  connection age and idle time, after which clients reconnect transparently; every call is
  served on its plane (:mod:`replay.wire.planes`: the operator's, health checks', experience),
  each with threads and limits of its own, and refusals never wait for a request's body.
- **Fairness** (:class:`StreamSlots`): every open Insert stream holds a worker thread, so at
  most ``max_workers - reserved`` of them run at once (a further one is answered
  RESOURCE_EXHAUSTED at once) and the reserved threads stay free for ``Control`` calls, health
  checks and weights; one principal (a credential or client certificate) holds at most
  :func:`streams_per_caller` of them, so another credential's writer always finds one (and a
  principal's bytes in flight are bounded by its streams, each a few batches). A stream that
  sends nothing for ``idle_s`` seconds is cancelled; a peer that vanished is found by keepalive
  within ``KEEPALIVE_MS + KEEPALIVE_TIMEOUT_MS`` (its stream then ends like a closed one).
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from replay.wire.auth import ScopedAuth, caller_identity
from replay.wire.planes import RECEIVE_S, Planes, Watchdog

# Worker threads kept from Insert streams at most (for Control, health checks and weights).
RESERVED_WORKERS = 4
KEEPALIVE_MS = 10_000
KEEPALIVE_TIMEOUT_MS = 5_000
MAX_CONNECTION_AGE_MS = 3_600_000
MAX_CONNECTION_IDLE_MS = 600_000
CONNECTION_GRACE_MS = 30_000
# Bind addresses that mean every interface.
WILDCARDS = ("0.0.0.0", "::", "")


@dataclasses.dataclass(frozen=True)
class ServerTls:
    """A server's TLS material (PEM bytes).

    Attributes:
        cert_chain: The server's certificate chain.
        private_key: Its private key.
        client_ca: Clients must present a certificate this CA signed (mutual TLS); None: any
            client may connect (and then authenticates with a token).
    """

    cert_chain: bytes
    private_key: bytes = dataclasses.field(repr=False)
    client_ca: bytes | None = None

    @classmethod
    def from_files(
        cls, cert_file: str, key_file: str, client_ca_file: str | None = None
    ) -> ServerTls:
        """Reads the PEM files (``grpc.tls.cert_file``, ``key_file``, ``client_ca_file``)."""
        ca = Path(client_ca_file).read_bytes() if client_ca_file else None
        return cls(Path(cert_file).read_bytes(), Path(key_file).read_bytes(), ca)

    def credentials(self) -> grpc.ServerCredentials:
        """The gRPC server credentials (client certificates required with a client CA)."""
        return grpc.ssl_server_credentials(
            ((self.private_key, self.cert_chain),),
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


def server_options(max_bytes: int) -> list[tuple[str, int]]:
    """Channel arguments of both servers for batches of at most ``max_bytes``."""
    limit = 2 * max_bytes + (1 << 20)
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_time_ms", KEEPALIVE_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_MS // 3),
        ("grpc.max_connection_age_ms", MAX_CONNECTION_AGE_MS),
        ("grpc.max_connection_age_grace_ms", CONNECTION_GRACE_MS),
        ("grpc.max_connection_idle_ms", MAX_CONNECTION_IDLE_MS),
    ]


def make_server(
    *,
    max_workers: int,
    max_bytes: int,
    operator: str | None = None,
    actor: str | None = None,
    receive_s: float = RECEIVE_S,
    calls_per_peer: int | None = None,
    thread_name: str = "grpc",
) -> tuple[grpc.Server, Planes]:
    """A ``grpc.server`` with both servers' limits, credentials and planes.

    Keyword Args:
        max_workers: Threads of the experience plane.
        max_bytes: The batch limit (messages may be twice that).
        operator: The operator secret (None: no credential is checked, loopback only).
        actor: The actor secret, or None.
        receive_s: Seconds a unary call's request may take to arrive.
        calls_per_peer: Experience calls one peer address may have in flight.
        thread_name: Prefix of the experience plane's thread names.

    Returns:
        The server (not started) and its :class:`replay.wire.planes.Planes` (close it once the
        server has stopped).
    """
    planes = Planes(
        operator=operator,
        max_workers=max_workers,
        receive_s=receive_s,
        calls_per_peer=calls_per_peer,
    )
    interceptors: list[grpc.ServerInterceptor] = [planes]
    if operator:
        interceptors.append(ScopedAuth(operator, actor))
    server = grpc.server(
        ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name),
        interceptors=interceptors,
        options=server_options(max_bytes),
    )
    return server, planes


def bind(server: grpc.Server, host: str, port: int, tls: ServerTls | None) -> int:
    """Listens on ``host:port`` (TLS when given); returns the port, 0 when it cannot bind."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, tls.credentials())
    except RuntimeError:
        return 0


def insert_streams(max_workers: int) -> int:
    """Insert streams a server of ``max_workers`` threads runs at once (the rest: Control)."""
    return max(1, max_workers - min(RESERVED_WORKERS, max_workers // 2))


def streams_per_caller(limit: int) -> int:
    """Insert streams one principal holds at most of ``limit``: all but a quarter (at least 1)."""
    return max(1, limit - max(1, limit // 4))


class StreamSlots:
    """Caps the Insert streams open at once (and per principal); cancels idle ones.

    Args:
        limit: Streams at once (:func:`insert_streams`).
        idle_s: Seconds a stream may wait for its client's next message (None: forever).

    Keyword Args:
        watchdog: The server's :class:`replay.wire.planes.Watchdog` (None: one of its own).
        per_caller: Streams one principal holds at most (None: :func:`streams_per_caller`);
            callers with no credential (none configured) are not told apart.

    Examples:
        >>> slots = StreamSlots(limit=1)
        >>> slots.open, slots.limit
        (0, 1)
    """

    def __init__(
        self,
        limit: int,
        idle_s: float | None = None,
        *,
        watchdog: Watchdog | None = None,
        per_caller: int | None = None,
    ) -> None:
        self.limit = limit
        self.idle_s = idle_s
        self.per_caller = per_caller or streams_per_caller(limit)
        self.open = 0
        self.held: dict[str, int] = {}  # streams per principal
        self._lock = threading.Lock()
        self.watchdog = watchdog or Watchdog()

    def guard(self, behavior):
        """Wraps a stream-unary handler ``behavior(request_iterator, context)``."""

        def guarded(request_iterator, context):
            principal = caller_identity(context).principal
            with self._lock:
                full = self.open >= self.limit
                mine = self.held.get(principal, 0) if principal else 0
                hogged = mine >= self.per_caller
                if not (full or hogged):
                    self.open += 1
                    if principal:
                        self.held[principal] = mine + 1
            if full:
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{self.limit} Insert streams are open, the most this server takes at once "
                    "(grpc.max_workers); retry later",
                )
            if hogged:
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"this credential holds {mine} Insert streams, the most one credential may "
                    f"hold of {self.limit} (the rest stay free for others); retry later",
                )
            try:
                return behavior(self._watched(request_iterator, context), context)
            finally:
                with self._lock:
                    self.open -= 1
                    if principal:
                        self.held[principal] -= 1
                        if not self.held[principal]:
                            del self.held[principal]

        return guarded

    def _watched(self, request_iterator, context):
        """Yields the client's messages; the wait for each is watched for ``idle_s``."""
        if self.idle_s is None:
            yield from request_iterator
            return
        while True:
            self.watchdog.watch(context, self.idle_s)
            try:
                request = next(request_iterator)
            except StopIteration:
                return
            finally:
                self.watchdog.unwatch(context)
            yield request

    def close(self) -> None:
        """Ends the watchdog (the server is stopping)."""
        self.watchdog.close()
