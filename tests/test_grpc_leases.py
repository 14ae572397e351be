"""Writer leases and stream memory on a replay shard's direct-write server (issue 42, 4 and 5).

Real servers on loopback (:func:`tests.shard_server.intake_server`, over a real table) and real
clients. The driver's side of the same (a poisoned writer written through the driver, a long
stream through the driver) is in ``tests/test_grpc_direct.py``, on its run.
"""

from __future__ import annotations

import threading
import tracemalloc

import grpc

from replay.wire.leases import WriterLeases, scoped_writer
from services.grpc.client import RelayClient
from tests.grpc_probe import transitions
from tests.shard_server import ACTOR, OPERATOR, code_of, intake_server
from tests.test_grpc_writers import insert, raw_insert, shard  # noqa: F401  (a fixture)


def stored(reply) -> list[int]:
    return [r.seq for r in reply.receipts if not r.duplicate and r.items]


def test_a_poisoned_writer_id_changes_nothing_for_the_real_writer(shard):  # noqa: F811
    table = shard["table"]
    with (
        RelayClient(shard["address"], token=ACTOR, writer_id="robot") as real,
        RelayClient(shard["address"], token=ACTOR, writer_id="robot") as poisoner,
        RelayClient(shard["address"], token=OPERATOR, writer_id="robot") as operator,
    ):
        # Before the real writer's first batch: another lease, a huge seq and a near one.
        for seq in (10**15, 900):
            assert insert(poisoner, poisoner.batch(transitions(4), seq=seq))[0] == "OK"
        assert insert(operator, operator.batch(transitions(4), seq=500))[0] == "OK"
        code, _, _ = raw_insert(shard["address"], real.batch(transitions(4), seq=700)
                                .SerializeToString())  # fmt: skip
        assert code == "OK"  # the credential alone (no lease id), anchored: a seq near -1 + 1024
        before = len(table)
        code, details, reply = insert(
            real, *[real.batch(transitions(10, s), seq=s) for s in range(8)]
        )
        assert code == "OK", details
        assert stored(reply) == list(range(8)) and reply.frames_counted == 80
        assert len(table) == before + 80
        # ...and after it: the poisoner's seqs past the real writer's are its own.
        assert insert(poisoner, poisoner.batch(transitions(4), seq=901))[0] == "OK"
        code, _, reply = insert(real, real.batch(transitions(10, 8), seq=8))
        assert code == "OK" and stored(reply) == [8]
        code, _, retry = insert(real, real.batch(transitions(10, 7), seq=7))  # honest retry
        assert code == "OK" and [r.duplicate for r in retry.receipts] == [True]


def test_a_restarted_writer_reclaims_its_id_at_once(shard):  # noqa: F811
    release = threading.Event()
    first = RelayClient(shard["address"], token=ACTOR, writer_id="fixed")
    assert insert(first, *[first.batch(transitions(5, s), seq=s) for s in range(3)])[0] == "OK"

    def held():  # the old process's stream: open, then gone with its process (channel)
        yield first.batch(transitions(5, 3), seq=3)
        release.wait(30)

    stream = first.experience.Insert.future(held(), metadata=first.metadata, timeout=30)
    try:
        # A restarted actor: same writer id and credential, a new client (and lease).
        with RelayClient(shard["address"], token=ACTOR, writer_id="fixed") as again:
            code, details, reply = insert(
                again, *[again.batch(transitions(5), seq=s) for s in range(3)]
            )
            assert code == "OK", details
            assert stored(reply) == [0, 1, 2]  # served while the old stream is still open
        first.close()  # the old process is gone: its stream ends
        assert stream.exception(timeout=10).code() == grpc.StatusCode.CANCELLED
        # One that kept its lease goes on where it was, retries still acknowledged.
        with RelayClient(
            shard["address"], token=ACTOR, writer_id="fixed", lease=first.lease
        ) as heir:
            code, _, reply = insert(heir, *[heir.batch(transitions(5), seq=s) for s in (2, 4)])
            assert code == "OK" and [r.duplicate for r in reply.receipts] == [True, False]
    finally:
        release.set()
        first.close()


def test_one_credential_cannot_lock_an_honest_writer_out():
    # 4 Insert streams; one credential may hold 3 (one peer address may hold 16 calls here).
    table, _, server, address = intake_server(max_workers=8, calls_per_peer=16)
    release = threading.Event()
    try:
        with (
            RelayClient(address, token=ACTOR, writer_id="hog") as hog,
            RelayClient(address, token=OPERATOR, writer_id="honest") as honest,
        ):
            many = [hog.batch(transitions(1), seq=0)]
            for n in range(4200):  # more writers than the book holds (4096)
                message = hog.batch(transitions(1), seq=0)
                message.writer_id = f"hog-{n}"
                many.append(message)
            assert insert(hog, *many)[0] == "OK"

            def idle():
                release.wait(30)
                yield hog.batch(transitions(1), seq=1)

            answered = threading.Event()
            held = [
                hog.experience.Insert.future(idle(), metadata=hog.metadata, timeout=30)
                for _ in range(4)
            ]
            for future in held:
                future.add_done_callback(lambda _: answered.set())
            assert answered.wait(10)
            [refused] = [f for f in held if f.done()]  # the 4th
            assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "one credential may hold" in refused.details()
            code, details, reply = insert(honest, honest.batch(transitions(7), seq=0))
            assert code == "OK" and reply.frames_counted == 7, details
            # Same credential, its own lease: the hog's leases make room, never refuse it.
            release.set()
            assert sum(f.result(timeout=10).frames_counted for f in held if f is not refused) == 1
            with RelayClient(address, token=ACTOR, writer_id="peer") as peer:
                code, details, reply = insert(peer, peer.batch(transitions(3), seq=5))
                assert code == "OK" and reply.frames_counted == 3, details
    finally:
        release.set()
        server.stop(0)
    assert len(table) == 4201 + 1 + 7 + 3


def test_lease_books_stay_bounded_and_fair_between_principals():
    now = [0.0]
    leases = WriterLeases(lease_s=10, window=8, max_writers=4, per_principal=2,
                          clock=lambda: now[0])  # fmt: skip
    for n in range(5):
        leases.admit(f"hog-{n}", 0, owner=f"lease-{n}", frames=1, principal="hog")
    assert leases.held("hog") == 2  # its own oldest went first
    leases.admit("honest", 0, owner="h", frames=1, principal="honest")
    leases.admit("other", 0, owner="o", frames=1, principal="other")
    leases.admit("third", 0, owner="t", frames=1, principal="third")  # full: the hog's goes
    assert len(leases) == 4 and leases.held("hog") == 1 and leases.held("honest") == 1
    assert scoped_writer("external/a", "x") != scoped_writer("external/a", "y")


def test_a_long_stream_holds_no_more_memory_than_a_short_one(shard):  # noqa: F811
    """Over 50 MB in one stream: what the server keeps does not grow with the bytes sent."""
    gate = shard["gate"]
    arrays = transitions(5000)
    traced: dict[int, int] = {}
    with RelayClient(shard["address"], token=ACTOR, writer_id="long") as client:
        message = client.batch(arrays, seq=0)

        def messages():
            for seq in range(180):
                message.seq = seq
                yield message.SerializeToString()
                gate.drain()  # as the driver does at every loop boundary
                if seq in (30, 179):
                    traced[seq] = tracemalloc.get_traced_memory()[0]

        with grpc.insecure_channel(
            shard["address"], options=[("grpc.max_send_message_length", 4 << 20)]
        ) as channel:
            call = channel.stream_unary(
                "/relayrl.v1.Experience/Insert", request_serializer=bytes,
                response_deserializer=lambda raw: raw,
            )  # fmt: skip
            metadata = (("authorization", f"Bearer {ACTOR}"), *client.metadata)
            tracemalloc.start()
            try:
                code, details = code_of(lambda: call(messages(), metadata=metadata, timeout=60))
            finally:
                tracemalloc.stop()
    assert code == "OK", details
    sent = 180 * len(message.SerializeToString())
    assert sent > 50e6
    grown = traced[179] - traced[30]
    print(f"stream memory: {sent / 1e6:.0f} MB sent, {grown / 1e6:.2f} MB more held")
    assert grown < 2e6, f"{grown / 1e6:.1f} MB more held after {sent / 1e6:.0f} MB sent"
