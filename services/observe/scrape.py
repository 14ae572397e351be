"""The ``/metrics`` HTTP server, bounded: a few connections at once, each with a timeout.

``prometheus_client.start_http_server`` starts one thread per connection and waits on a client
forever, so idle connections pile up threads. :class:`BoundedMetricsServer` serves at most
``max_connections`` at once (a further one is closed at once; Prometheus retries at its next
scrape) and drops a connection that sends or reads nothing for ``timeout_s`` seconds.

Examples:
    >>> from prometheus_client import CollectorRegistry
    >>> server, thread = start_metrics_server("127.0.0.1", 0, CollectorRegistry())
    >>> server.server_port > 0
    True
    >>> server.shutdown(); server.server_close()
"""

from __future__ import annotations

import socket
import threading
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

# Scrapes served at once, and seconds a connection may stay silent.
MAX_CONNECTIONS = 8
TIMEOUT_S = 10.0


class BoundedMetricsServer(ThreadingHTTPServer):
    """A threading HTTP server with at most ``max_connections`` threads and socket timeouts.

    Args:
        address: ``(host, port)``.
        handler: The request handler class.

    Keyword Args:
        max_connections: Connections served at once (more are closed at once).
        timeout_s: Seconds a connection may stay silent.
    """

    daemon_threads = True
    request_queue_size = 64  # connections waiting to be accepted (then served or closed)

    def __init__(
        self,
        address: tuple[str, int],
        handler,
        *,
        max_connections: int = MAX_CONNECTIONS,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.slots = threading.BoundedSemaphore(max_connections)
        self.timeout_s = timeout_s
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        """Serves the connection on a thread of its own, if one of the slots is free."""
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # over capacity: closed now, retried next scrape
            return
        request.settimeout(self.timeout_s)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        """Serves one connection, then gives its slot back."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def start_metrics_server(
    host: str,
    port: int,
    registry: CollectorRegistry,
    *,
    max_connections: int = MAX_CONNECTIONS,
    timeout_s: float = TIMEOUT_S,
) -> tuple[BoundedMetricsServer, threading.Thread]:
    """Serves ``registry`` at ``http://host:port/metrics`` from a daemon thread.

    Returns:
        The server (``server_port`` is the bound port) and its thread.
    """
    server = BoundedMetricsServer(
        (host, port),
        MetricsHandler.factory(registry),
        max_connections=max_connections,
        timeout_s=timeout_s,
    )
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return server, thread
