"""The /metrics server is bounded: idle connections hold a few threads at most, and time out.

A real :class:`BoundedMetricsServer` on loopback, real sockets and real scrapes.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

from prometheus_client import CollectorRegistry, Counter

from services.observe.scrape import start_metrics_server


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return reply.read().decode()


def test_idle_connections_cannot_pile_up_threads_and_time_out():
    registry = CollectorRegistry()
    Counter("relayrl_probe", "a probe", registry=registry).inc()
    server, _ = start_metrics_server("127.0.0.1", 0, registry, max_connections=4, timeout_s=0.5)
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", server.server_port)) for _ in range(40)]
    try:
        assert threading.active_count() - before <= 4  # not one thread per connection
        # The idle ones are dropped after 0.5 s; then a scrape is answered.
        deadline = time.monotonic() + 10.0
        text = None
        while text is None and time.monotonic() < deadline:
            try:
                text = scrape(server.server_port)
            except OSError:  # closed at once while the slots are taken
                continue
        assert text is not None and "relayrl_probe_total 1.0" in text
        assert threading.active_count() - before <= 4
    finally:
        for sock in idle:
            sock.close()
        server.shutdown()
        server.server_close()
