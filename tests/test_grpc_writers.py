"""Writers on the hardened external plane: ownership, seqs, leases, hostile messages, binding.

Real servers on loopback (a replay shard's direct-write server over a real table,
:func:`tests.shard_server.intake_server`) and real clients.
"""

from __future__ import annotations

import socket
import threading
import time

import grpc
import numpy as np
import pytest

import replay.persist.checkpoint
import replay.table
from replay.table import ReplayTable
from replay.wire.leases import Refused, WriterLeases
from services.grpc.client import RelayClient
from tests.grpc_probe import transitions
from tests.shard_server import ACTOR, OPERATOR, code_of, intake_server
from tests.test_wire import field, varint


@pytest.fixture
def shard():
    table, gate, server, address = intake_server()
    yield {"table": table, "gate": gate, "address": address}
    server.stop(0)


def insert(client: RelayClient, *requests) -> tuple[str, str, object]:
    out = {}

    def call():
        out["reply"] = client.experience.Insert(
            iter(requests), metadata=client.metadata, timeout=30
        )

    code, details = code_of(call)
    return code, details, out.get("reply")


def test_writer_ids_are_scoped_to_their_caller_and_seq_may_not_jump(shard):
    table = shard["table"]
    with (
        RelayClient(shard["address"], token=ACTOR, writer_id="robot") as owner,
        RelayClient(shard["address"], token=ACTOR, writer_id="robot") as impostor,
    ):
        first = [owner.batch(transitions(10, s), seq=s) for s in (0, 1)]
        assert insert(owner, *first)[0] == "OK" and len(table) == 20
        # Same credential, another client (lease): it writes a writer of its own.
        code, _, reply = insert(impostor, impostor.batch(transitions(10), seq=2))
        assert code == "OK" and reply.frames_counted == 10 and len(table) == 30
        # No caller may jump far ahead (it would make its later batches retries).
        for client in (owner, impostor):
            code, details, _ = insert(client, client.batch(transitions(10), seq=10**15))
            assert code == "INVALID_ARGUMENT" and details.startswith("seq:"), details
        assert len(table) == 30
        code, _, retry = insert(owner, *first)  # honest retries stay duplicates
        assert code == "OK" and [r.duplicate for r in retry.receipts] == [True, True]
        code, _, reply = insert(owner, owner.batch(transitions(10, 2), seq=2))  # not poisoned
        assert code == "OK" and reply.frames_counted == 10 and len(table) == 40
        # A client that takes over a writer id on purpose passes its lease.
        with RelayClient(
            shard["address"], token=ACTOR, writer_id="robot", lease=owner.lease
        ) as heir:
            code, _, reply = insert(heir, heir.batch(transitions(10, 2), seq=2), heir.batch(
                transitions(10, 3), seq=3))  # fmt: skip
            assert code == "OK" and [r.duplicate for r in reply.receipts] == [True, False]
    receipts = shard["gate"].drain()
    assert [r.seq for r in receipts if r.frames] == [0, 1, 2, 2, 3]  # only what was stored counts


def raw_insert(address: str, message: bytes) -> tuple[str, str, float]:
    with grpc.insecure_channel(
        address, options=[("grpc.max_send_message_length", 256 << 20)]
    ) as channel:
        call = channel.stream_unary("/relayrl.v1.Experience/Insert", request_serializer=bytes)
        metadata = (("authorization", f"Bearer {ACTOR}"),)
        started = time.perf_counter()
        code, details = code_of(lambda: call(iter([message]), metadata=metadata, timeout=60))
        return code, details, time.perf_counter() - started


def test_hostile_messages_are_refused_in_bounded_time_and_nothing_is_stored(shard):
    gate = shard["gate"]
    gate.version_wait_s = 0.05
    with RelayClient(shard["address"], token=ACTOR, writer_id="hostile") as client:

        def batch(**changes):
            arrays = transitions(16)
            returns = changes.pop("episode_returns", [])
            lengths = changes.pop("episode_lengths", [1] * len(returns))
            arrays.update(changes)
            return client.batch(
                arrays, seq=0, episode_returns=returns, episode_lengths=lengths
            ).SerializeToString()

        tensor = field(1, 2, b"reward") + field(2, 2, b"float32")
        cases = {
            "packed shape of 2 MiB": field(3, 2, tensor + field(3, 2, varint(1) * (2 << 20))),
            "writer_id of 1 MiB": field(1, 2, b"w" * (1 << 20)),
            "100 tensors": b"".join(field(3, 2, tensor) for _ in range(100)),
            "unknown fields": field(9, 0, varint(1)) * 100_000,
            "NaN return": batch(episode_returns=[float("nan")]),
            "length 0": batch(episode_returns=[1.0], episode_lengths=[0]),
            "discount 1.5": batch(n_step_discount=np.full(16, 1.5, np.float32)),
            "version from the future": batch(policy_version=np.full(16, 7, np.int64)),
        }
        named = {
            "packed shape of 2 MiB": "Tensor.shape",
            "writer_id of 1 MiB": "writer_id",
            "100 tensors": "tensors",
            "unknown fields": "InsertRequest",
            "NaN return": "episode_returns",
            "length 0": "episode_lengths",
            "discount 1.5": "n_step_discount",
            "version from the future": "policy_version",
        }
        for name, message in cases.items():
            code, details, seconds = raw_insert(shard["address"], message)
            assert code == "INVALID_ARGUMENT" and named[name] in details, (name, details)
            assert len(details) < 400 and seconds < 1.0, (name, len(details), seconds)
        assert len(shard["table"]) == 0 and gate.drain() == []
        assert insert(client, client.batch(transitions(16), seq=0))[0] == "OK"  # still serving
    assert len(shard["table"]) == 16


def test_insert_streams_are_capped_and_idle_ones_cancelled():
    # 2 Insert streams, 1 per credential (one peer may hold up to 8 calls here)
    table, _, server, address = intake_server(max_workers=4, idle_s=0.5, calls_per_peer=8)
    release = threading.Event()
    try:
        with (
            RelayClient(address, token=ACTOR) as client,
            RelayClient(address, token=OPERATOR) as operator,
        ):

            def idle(by: RelayClient):
                release.wait(30)
                yield by.batch(transitions(4))

            held = [
                by.experience.Insert.future(idle(by), metadata=by.metadata, timeout=30)
                for by in (client, operator)
            ]
            time.sleep(0.1)  # let both streams take their slots (an open stream has no event)
            code, details, _ = insert(client, client.batch(transitions(4)))
            assert code == "RESOURCE_EXHAUSTED" and "Insert streams" in details, details
            # Idle past 0.5 s, both are cancelled and their slots come free.
            for future in held:
                assert future.exception(timeout=10).code() == grpc.StatusCode.CANCELLED
            code, _, reply = insert(client, client.batch(transitions(4)))
            assert code == "OK" and reply.frames_counted == 4 and len(table) == 4
    finally:
        release.set()
        server.stop(0)


def test_a_shard_binds_the_interface_the_operator_chose():
    for host, node_ip, expected in (
        ("127.0.0.2", "127.0.0.1", "127.0.0.2"),  # an interface of this node: that one only
        ("192.0.2.1", "127.0.0.1", "127.0.0.1"),  # another node's address: this node's own
    ):
        _, _, server, address = intake_server(host=host, node_ip=node_ip)
        try:
            bound, port = address.rsplit(":", 1)
            assert bound == expected
            others = {"127.0.0.1", "127.0.0.2"} - {expected}
            for other in others:  # not every interface
                with socket.socket() as sock:
                    assert sock.connect_ex((other, int(port))) != 0, (host, other)
        finally:
            server.stop(0)


def test_leases_expire_and_rate_limits_hold_per_writer():
    now = [0.0]
    leases = WriterLeases(
        lease_s=10, window=8, max_writers=2, frames_per_s=100, clock=lambda: now[0]
    )
    leases.admit("a", 0, owner="x", frames=100)
    with pytest.raises(Refused, match="writer_frames_per_s") as over:
        leases.admit("a", 1, owner="x", frames=50)  # the second's burst is spent
    assert over.value.code == "RESOURCE_EXHAUSTED"
    now[0] = 0.6
    leases.admit("a", 1, owner="x", frames=50)  # 60 frames refilled
    leases.admit("b", 0, owner="y", frames=1)
    leases.admit("c", 0, owner="z", frames=1)  # full: room is made (the book is bounded)
    assert len(leases) == 2
    now[0] = 20.0  # idle past their lease: expired
    leases.admit("d", 0, owner="z", frames=1)
    assert len(leases) == 1


def test_callers_that_cannot_be_told_apart_start_their_writers_at_minus_one(shard):
    """Without a lease id or certificate, a huge first seq would turn later batches into retries."""
    anchored = transitions(8)
    with RelayClient(shard["address"], token=ACTOR, writer_id="shared") as client:
        message = client.batch(anchored, seq=10**12).SerializeToString()
        code, details, _ = raw_insert(shard["address"], message)  # the credential alone
        assert code == "INVALID_ARGUMENT" and details.startswith("seq:"), details
        code, _, reply = insert(client, client.batch(anchored, seq=5000))  # a lease id
        assert code == "OK" and reply.frames_counted == 8  # fails over at its own seq
    assert len(shard["table"]) == 8


def test_dedup_state_is_bounded_in_tables_and_their_checkpoints(monkeypatch, tmp_path):
    monkeypatch.setattr(replay.table, "MAX_WRITERS", 3)
    monkeypatch.setattr(replay.persist.checkpoint, "MAX_WRITERS", 3)
    table = ReplayTable(100, seed=0)
    batch = {"x": np.zeros((2, 1), np.float32)}
    for writer in ("a", "b", "c", "d"):
        table.write(batch, writer, 0)
    table.write(batch, "b", 1)  # b is the most recent now; a went first
    assert list(table._last) == ["c", "d", "b"]
    assert table.write(batch, "c", 0).duplicate  # kept writers still recognize retries
    replay.persist.checkpoint.dump_table(table, tmp_path / "t")
    restored = replay.persist.checkpoint.load_table(tmp_path / "t")
    assert list(restored._last) == ["c", "d", "b"]  # the same writers, in the same order
