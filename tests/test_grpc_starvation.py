"""Nobody can starve the gRPC plane: half-open calls, floods, and one caller taking everything.

Real servers on loopback (the driver's :class:`GrpcServer` before its run starts), real gRPC
clients. A *half-open* call sends its headers and never its body: a client stream whose request
iterator blocks until the test releases it.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from services.config.grpc import GrpcConfig
from services.driver.inbox import Inbox
from services.grpc.client import RelayClient
from services.grpc.server import GrpcServer
from services.grpc.transitions import env_transition_spec
from tests.grpc_probe import transitions

SPEC = env_transition_spec("CartPole-v1")
OPERATOR, ACTOR = "operator-secret", "actor-secret"
UNARY = (
    "/relayrl.v1.Control/GetStatus",
    "/relayrl.v1.Control/Stop",
    "/relayrl.v1.Control/Checkpoint",
    "/relayrl.v1.Experience/GetRoute",
    "/relayrl.v1.Experience/GetWeights",
    "/grpc.health.v1.Health/Check",
)


class HalfOpen:
    """Calls that send their headers and never their body, until :meth:`release`."""

    def __init__(self, address: str) -> None:
        self.channels = [grpc.insecure_channel(address) for _ in range(4)]
        self.released = threading.Event()
        self.futures: list[grpc.Future] = []

    def _never(self):
        self.released.wait(60)
        return
        yield  # a generator that yields nothing

    def open(self, method: str, count: int, token: str | None = None) -> list[grpc.Future]:
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        opened = []
        for index in range(count):
            call = self.channels[index % len(self.channels)].stream_unary(method)
            opened.append(call.future(self._never(), metadata=metadata, timeout=60))
        self.futures += opened
        return opened

    def release(self) -> None:
        self.released.set()
        for channel in self.channels:
            channel.close()


def status_latencies(operator: RelayClient, count: int = 5) -> list[float]:
    """Seconds each of ``count`` GetStatus calls took (each must answer within 1 s)."""
    latencies = []
    for _ in range(count):
        start = time.monotonic()
        assert operator.status().state == "starting"
        latencies.append(time.monotonic() - start)
    return latencies


@pytest.fixture
def server():
    config = GrpcConfig(
        port=0, token=OPERATOR, actor_token=ACTOR, receive_timeout_s=1.0, stream_idle_s=1.0
    )
    server = GrpcServer(config, Inbox(), spec=SPEC)
    yield server
    server.stop()


@pytest.fixture
def operator(server):
    """The operator's client, connected before any attack (its deadline: 1 s)."""
    with RelayClient(server.address, token=OPERATOR) as client:
        client.timeout = 1.0
        client.status()
        yield client


def test_calls_without_credentials_are_refused_before_their_body_and_starve_nothing(
    server, operator
):
    attack = HalfOpen(server.address)
    try:
        refused = [future for method in UNARY[:5] for future in attack.open(method, 12)]
        refused += attack.open("/relayrl.v1.Experience/Insert", 12)
        # The health check needs no credential: it waits for its body (at most the receive
        # deadline) on threads of its own.
        health = attack.open(UNARY[5], 24)
        # Refused at once, while their bodies are still being withheld.
        for future in refused:
            assert future.exception(timeout=5).code() == grpc.StatusCode.UNAUTHENTICATED
        assert not attack.released.is_set()
        # The operator is answered within a second, every time.
        latencies = status_latencies(operator)
        assert max(latencies) < 1.0, latencies
        # The half-open health checks end at the receive deadline (1 s here), or are refused
        # at once beyond the health checks' own capacity.
        codes = {future.exception(timeout=10).code().name for future in health}
        assert codes == {"CANCELLED", "RESOURCE_EXHAUSTED"}, codes
    finally:
        attack.release()


def test_an_actor_credential_cannot_starve_the_operator(server, operator):
    attack = HalfOpen(server.address)
    try:
        held = [future for method in UNARY[:5] for future in attack.open(method, 20, ACTOR)]
        held += attack.open("/relayrl.v1.Experience/Insert", 40, ACTOR)
        latencies = status_latencies(operator)
        assert max(latencies) < 1.0, latencies
        # Unary calls end at their receive deadline; beyond its share, a caller is refused.
        codes = {future.exception(timeout=10).code().name for future in held}
        assert codes == {"CANCELLED", "RESOURCE_EXHAUSTED", "PERMISSION_DENIED"}, codes
    finally:
        attack.release()
    # Once its calls have ended, the same credential is served again (the server may still be
    # ending the last of them when their clients hear of it).
    with RelayClient(server.address, token=ACTOR) as client:
        deadline = time.monotonic() + 10.0
        code = grpc.StatusCode.RESOURCE_EXHAUSTED
        while code == grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() < deadline:
            try:
                client.insert([client.batch(transitions(4))])
            except grpc.RpcError as err:
                code = err.code()
        assert code == grpc.StatusCode.UNAVAILABLE  # reached its handler: no replay yet
