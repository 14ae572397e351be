"""A replay shard's direct-write server over a real table, for the gRPC plane's tests.

:func:`intake_server` starts the server a shard starts (on loopback unless told otherwise) over a
real :class:`ReplayTable`; :func:`code_of` turns a call into its status code and details.
"""

from __future__ import annotations

import threading

import grpc

from replay.intake import start_intake_server
from replay.table import ReplayTable
from services.grpc.transitions import env_transition_spec

SPEC = env_transition_spec("CartPole-v1")
OPERATOR, ACTOR = "operator-secret", "actor-secret"


def code_of(call) -> tuple[str, str]:
    try:
        call()
    except grpc.RpcError as err:
        return err.code().name, err.details() or ""
    return "OK", ""


def intake_server(
    *,
    tls=None,
    max_workers: int = 8,
    idle_s=None,
    host="127.0.0.1",
    node_ip="127.0.0.1",
    published_version=0,
    calls_per_peer=None,
    spec=SPEC,
):
    table = ReplayTable(10_000, seed=0)
    lock = threading.Lock()

    def write(arrays, writer, seq):
        with lock:
            return table.write(arrays, writer, seq)

    options = {
        "spec": spec,
        "num_shards": 1,
        "host": host,
        "operator": OPERATOR,
        "actor": ACTOR,
        "tls": tls,
        "max_bytes": 1 << 20,
        "max_workers": max_workers,
        "lease_s": 300.0,
        "frames_per_s": None,
        "clip_actions": False,
        "idle_s": idle_s,
        "calls_per_peer": calls_per_peer,
        "published_version": published_version,
    }
    gate, server, address = start_intake_server(write, 0, options, node_ip=node_ip)
    gate.set(open=True, closed=False, total_frames=0, published_version=published_version)
    return table, gate, server, address
