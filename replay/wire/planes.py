"""Capacity of its own for each kind of caller, so that no caller can starve another.

gRPC's synchronous server gives every call a worker thread from the moment its headers arrive,
and a unary call whose body never comes would hold that thread for good. Both servers (the
driver's and every replay shard's) therefore serve each call on one of three *planes*, each with
threads and limits of its own (:class:`Planes`, the outermost interceptor):

- **operator**: calls carrying the operator credential other than ``Experience``'s (``Control``,
  reflection; with no credential configured, every ``Control`` call): :data:`OPERATOR_WORKERS`
  threads no other caller can take, so ``GetStatus``, ``Stop`` and ``Checkpoint`` are answered
  while everything else is saturated.
- **open**: health checks, the only calls that need no credential: :data:`OPEN_WORKERS` threads
  and at most :data:`OPEN_INFLIGHT` calls in flight (RESOURCE_EXHAUSTED beyond, at once).
- **experience**: everything else (Insert, GetWeights, GetRoute, an actor's GetStatus) on the
  server's ``max_workers`` threads, at most ``calls_per_peer`` of them from one peer address
  (RESOURCE_EXHAUSTED beyond) and :data:`RPCS_PER_WORKER` per thread in all.

A call that is refused (no credential, a wrong one, a scope that does not cover it, a full
plane) is answered on a thread of its own before its body is read. Every unary call reads its
request through a watched iterator: one that has not arrived within ``receive_s`` seconds is
cancelled (:class:`Watchdog`), as is an Insert stream idle for ``grpc.stream_idle_s``.

Examples:
    >>> planes = Planes(operator="s3cret", max_workers=8)
    >>> planes.plane("/relayrl.v1.Control/Stop", "Bearer s3cret")
    'operator'
    >>> planes.plane("/relayrl.v1.Control/GetStatus", "Bearer guess")
    'experience'
    >>> planes.close()
"""

from __future__ import annotations

import hmac
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc

from replay.wire.auth import OPEN_PREFIXES, is_refusal, refusal

# Threads of the operator's plane and of the health checks'.
OPERATOR_WORKERS = 4
OPEN_WORKERS = 2
# Calls in flight (running or waiting for a thread) per plane before RESOURCE_EXHAUSTED.
OPERATOR_INFLIGHT = 64
OPEN_INFLIGHT = 4
# Experience calls in flight per worker thread.
RPCS_PER_WORKER = 8
# Seconds a unary call's request may take to arrive.
RECEIVE_S = 10.0
EXPERIENCE_PREFIX = "/relayrl.v1.Experience/"
CONTROL_PREFIX = "/relayrl.v1.Control/"


class Watchdog:
    """Cancels calls that wait for their client past a deadline (one thread per server).

    Examples:
        >>> watchdog = Watchdog()
        >>> watchdog.close()
    """

    def __init__(self) -> None:
        self._waiting: dict[int, tuple[float, grpc.ServicerContext]] = {}
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, context, seconds: float) -> None:
        """Cancels ``context`` in ``seconds`` unless :meth:`unwatch` comes first."""
        with self._condition:
            self._waiting[id(context)] = (time.monotonic() + seconds, context)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="grpc-watchdog", daemon=True)
                self._thread.start()
            self._condition.notify()

    def unwatch(self, context) -> None:
        """Forgets ``context`` (its client sent what it waited for)."""
        with self._condition:
            self._waiting.pop(id(context), None)

    def close(self) -> None:
        """Ends the watchdog's thread (the server is stopping)."""
        with self._condition:
            self._closed = True
            self._condition.notify()

    def _run(self) -> None:
        while True:
            with self._condition:
                if self._closed:
                    return
                now = time.monotonic()
                due = [key for key, (deadline, _) in self._waiting.items() if deadline <= now]
                expired = [self._waiting.pop(key)[1] for key in due]
                if not expired:
                    nearest = min((d for d, _ in self._waiting.values()), default=now + 60.0)
                    self._condition.wait(nearest - now)
            for context in expired:
                context.cancel()  # the handler's read raises and the call ends CANCELLED


def peer_address(context) -> str:
    """The caller's address without its port (``ipv4:10.0.0.5:4242`` -> ``ipv4:10.0.0.5``)."""
    peer = context.peer() or ""
    return peer.rsplit(":", 1)[0] if peer.count(":") >= 2 else peer


class Planes(grpc.ServerInterceptor):
    """Serves each call on its plane (see the module docstring); install it first.

    Keyword Args:
        operator: The operator secret, or None (no credential configured).
        max_workers: The server's worker threads (the experience plane's).
        receive_s: Seconds a unary call's request may take to arrive.
        calls_per_peer: Experience calls one peer address may have in flight (None: half of
            ``max_workers``).
    """

    def __init__(
        self,
        *,
        operator: str | None,
        max_workers: int,
        receive_s: float = RECEIVE_S,
        calls_per_peer: int | None = None,
    ) -> None:
        self.operator = f"Bearer {operator}".encode() if operator else None
        self.receive_s = receive_s
        self.calls_per_peer = calls_per_peer or max(1, max_workers // 2)
        self.watchdog = Watchdog()
        self.pools = {
            "operator": ThreadPoolExecutor(OPERATOR_WORKERS, thread_name_prefix="grpc-operator"),
            "open": ThreadPoolExecutor(OPEN_WORKERS, thread_name_prefix="grpc-open"),
            "refusal": ThreadPoolExecutor(1, thread_name_prefix="grpc-refusal"),
        }
        self.limits = {
            "operator": OPERATOR_INFLIGHT,
            "open": OPEN_INFLIGHT,
            "experience": RPCS_PER_WORKER * max_workers,
        }
        self.inflight = dict.fromkeys(self.limits, 0)
        self.peers: dict[str, int] = {}
        self._lock = threading.Lock()

    def plane(self, method: str, authorization: str) -> str:
        """The plane a call of ``method`` with this ``authorization`` header is served on."""
        if method.startswith(OPEN_PREFIXES):
            return "open"
        if method.startswith(EXPERIENCE_PREFIX):
            return "experience"
        if self.operator is None:
            return "operator" if method.startswith(CONTROL_PREFIX) else "experience"
        if hmac.compare_digest(authorization.encode(), self.operator):
            return "operator"
        return "experience"

    def intercept_service(self, continuation, handler_call_details):
        """Moves the call to its plane's threads, or refuses it when the plane is full."""
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        if is_refusal(handler):
            return _with_pool(handler, self.pools["refusal"])
        metadata = dict(handler_call_details.invocation_metadata or ())
        name = self.plane(handler_call_details.method, str(metadata.get("authorization", "")))
        with self._lock:
            full = self.inflight[name] >= self.limits[name]
            if not full:
                self.inflight[name] += 1
        if full:
            return refusal(
                handler,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.limits[name]} calls are in flight, the most this server takes; retry later",
                pool=self.pools["refusal"],
            )
        return self._served(handler, name)

    def _served(self, handler, name: str):
        """``handler`` reading its request under the receive deadline, on plane ``name``."""
        behavior = _behavior(handler)

        def argument(request_iterator, context):
            if handler.request_streaming:
                return request_iterator
            self.watchdog.watch(context, self.receive_s)
            try:
                return next(request_iterator)
            except StopIteration:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call sent no request")
            finally:
                self.watchdog.unwatch(context)

        def served(request_iterator, context):
            release = self._enter(name, context)
            if not context.add_callback(release):
                release()  # the call has already ended
            if handler.response_streaming:
                return behavior(argument(request_iterator, context), context)
            try:
                return behavior(argument(request_iterator, context), context)
            finally:
                release()  # at once, not only when gRPC has ended the call

        make = (
            grpc.stream_stream_rpc_method_handler
            if handler.response_streaming
            else grpc.stream_unary_rpc_method_handler
        )
        served.experimental_thread_pool = self.pools.get(name)  # type: ignore[attr-defined]
        return make(
            served,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _enter(self, name: str, context):
        """Counts the call against its peer's share; returns what gives its place back.

        Raises:
            Exception: ``context.abort``'s, RESOURCE_EXHAUSTED, when the peer's share is taken.
        """
        key = peer_address(context) if name == "experience" else None
        if key is not None:
            with self._lock:
                held = self.peers.get(key, 0)
                if held < self.calls_per_peer:
                    self.peers[key] = held + 1
        given_back = threading.Lock()

        def release(peer: str | None = key) -> None:
            if not given_back.acquire(blocking=False):
                return
            with self._lock:
                self.inflight[name] -= 1
                if peer is not None:
                    self.peers[peer] -= 1
                    if not self.peers[peer]:
                        del self.peers[peer]

        if key is not None and held >= self.calls_per_peer:
            release(None)
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{held} calls from this address are in flight, the most one address may have "
                "(grpc.calls_per_peer); retry later",
            )
        return release

    def close(self) -> None:
        """Ends the watchdog and the planes' threads (the server has stopped)."""
        self.watchdog.close()
        for pool in self.pools.values():
            pool.shutdown(wait=False, cancel_futures=True)


def _behavior(handler):
    return (
        handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    )


def _with_pool(handler, pool: ThreadPoolExecutor):
    _behavior(handler).experimental_thread_pool = pool
    return handler
