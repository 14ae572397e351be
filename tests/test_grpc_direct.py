"""Direct writes (``grpc.direct_writes``): replay shards serve Insert themselves, on a real Ray.

One run for the module (no collectors, in this process, its gRPC server on loopback, every
listener with TLS, an operator and an actor credential); the clients are real: the example
external actor in another process and :class:`RelayClient`. Its checkpoints go to a small
tmpfs where one can be mounted, so a test can fill it up mid-run (else a directory that refuses
writes stands in, see ``tests/diskfaults.py``). The tests go in file order; the last one stops
the run.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import threading
import time
import tracemalloc
from pathlib import Path

import grpc
import pytest
import ray

from replay.intake import IntakeGate
from replay.wire import experience_pb2 as pb
from replay.wire import experience_pb2_grpc as pb_grpc
from replay.wire.batches import ExternalReceipt, shard_of
from services.bench.wire.certs import make_pki
from services.checkpoints.store import latest_valid
from services.config import load_config
from services.driver.controller import Controller
from services.grpc.client import RelayClient
from services.grpc.server import serve_run
from tests import diskfaults
from tests.cli_run import CliRun
from tests.grpc_probe import transitions
from tests.test_grpc_run import consistent_cut

TOKEN, ACTOR_TOKEN = "direct-token", "direct-actor-token"


def until(condition, timeout: float = 120.0, what: str = "condition"):
    """Awaits ``condition()`` (the driver counts direct writes at its next loop boundary)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


@pytest.fixture(scope="module")
def run(ray_cluster, tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    checkpoints = tmp_path_factory.mktemp("direct") / "checkpoints"
    mounted = diskfaults.tmpfs(checkpoints)
    config = load_config(
        overrides=[
            "run.name=grpc-direct",
            "collector.num_collectors=0",
            "grpc.port=0",
            f"grpc.token={TOKEN}",
            f"grpc.actor_token={ACTOR_TOKEN}",
            f"grpc.tls.cert_file={pki['server_cert']}",
            f"grpc.tls.key_file={pki['server_key']}",
            "grpc.direct_writes=true",
            "grpc.max_message_mb=0.25",
            "controller.total_frames=100000000",
            "controller.init_random_frames=500",
            "controller.utd_ratio=0.01",  # writes rarely wait on the learners (this is not pacing)
            "learner.global_batch_size=32",
            "replay.num_shards=2",
            "replay.capacity=100000",
            "replay.health_interval_s=0.2",
            "metrics.enabled=false",
            f"checkpoint.dir={checkpoints}",
            "checkpoint.keep=10",
        ]
    )
    controller = Controller(config)
    server = serve_run(config, controller)
    controller.setup()
    state: dict = {"controller": controller, "server": server, "ca": pki["ca"], "tmpfs": mounted}
    # As services.train does: train until stopped (the last checkpoint), then shut down.
    trainer = threading.Thread(target=lambda: state.update(summary=controller.run()), daemon=True)
    trainer.start()
    client = RelayClient(server.address, token=TOKEN, writer_id="direct-test", ca_file=pki["ca"])
    state.update(client=client, trainer=trainer)
    try:
        client.wait_health("SERVING", timeout=120)
        yield state
    finally:
        if trainer.is_alive():
            controller.request_stop("test module ended")
            trainer.join(timeout=120)
        client.close()
        server.stop()
        if mounted:
            diskfaults.unmount(checkpoints)


def sizes(client: RelayClient) -> list[int]:
    return [shard.size for shard in client.status().replay]


def test_the_route_names_a_server_in_every_shard(run):
    route = run["client"].route()
    assert len(route.shard_addresses) == 2 and route.group == 8 and route.epoch == 0
    assert run["server"].address not in route.shard_addresses
    assert all(a.startswith("127.0.0.1:") for a in route.shard_addresses)


def test_direct_inserts_are_stored_counted_and_retries_acknowledged(run):
    client = run["client"]
    before, frames = sizes(client), client.status().frames
    requests = [client.batch(transitions(100, seed), seq=seed) for seed in range(12)]
    reply = client.insert_direct(requests)  # seq 0-7 go to one shard, 8-11 to the other
    assert reply.frames_counted == 1200
    assert [r.seq for r in reply.receipts] == list(range(12))
    owners = [shard_of("external/direct-test", seq, 2) for seq in range(12)]
    assert [r.shard_id for r in reply.receipts] == owners and set(owners) == {0, 1}
    status = until(lambda: (s := client.status()).frames == frames + 1200 and s, what="count")
    assert status.external_frames == status.frames
    stored = sizes(client)
    assert [after - b for after, b in zip(stored, before, strict=True)] == [
        100 * owners.count(0),
        100 * owners.count(1),
    ]
    retry = client.insert_direct(requests)
    assert retry.frames_counted == 0 and all(r.duplicate for r in retry.receipts)
    assert sizes(client) == stored and client.status().frames == frames + 1200
    run["next_seq"] = 12


def refused(call) -> tuple[str, str]:
    try:
        call()
    except grpc.RpcError as err:
        return err.code().name, err.details()
    return "OK", ""


def test_a_shard_refuses_bad_input_and_keeps_serving(run):
    client = run["client"]
    addresses = list(client.route().shard_addresses)
    before, frames = sizes(client), client.status().frames
    seq = 1000  # shard_of(..., 1000) names the owner; the other shard must refuse it
    owner = shard_of("external/direct-test", seq, 2)
    credentials = grpc.ssl_channel_credentials(Path(run["ca"]).read_bytes())
    channel = grpc.secure_channel(addresses[1 - owner], credentials)
    stub = pb_grpc.ExperienceStub(channel)
    metadata = client.metadata  # its credential and lease: the writer id stays the client's
    good = client.batch(transitions(64), seq=seq)
    nan = transitions(64)
    nan["reward"][5] = float("nan")
    cases = {
        "wrong_shard": refused(lambda: stub.Insert(iter([good]), metadata=metadata, timeout=30)),
        "no_token": refused(lambda: stub.Insert(iter([good]), timeout=30)),
    }
    owner_channel = grpc.secure_channel(addresses[owner], credentials)
    owner_stub = pb_grpc.ExperienceStub(owner_channel)
    cases["nan_reward"] = refused(
        lambda: owner_stub.Insert(iter([client.batch(nan, seq=seq)]), metadata=metadata, timeout=30)
    )
    garbage = owner_channel.stream_unary(
        "/relayrl.v1.Experience/Insert", request_serializer=lambda b: b
    )
    cases["garbage"] = refused(lambda: garbage(iter([b"\x0a\x05ab"]), metadata=metadata))
    assert cases["wrong_shard"][0] == "INVALID_ARGUMENT" and "seq:" in cases["wrong_shard"][1]
    assert f"belongs to shard {owner}" in cases["wrong_shard"][1]
    assert cases["no_token"][0] == "UNAUTHENTICATED"
    assert cases["nan_reward"][0] == "INVALID_ARGUMENT" and "key 'reward'" in cases["nan_reward"][1]
    assert cases["garbage"][0] == "INVALID_ARGUMENT" and "message:" in cases["garbage"][1]
    assert sizes(client) == before and client.status().frames == frames
    kept = owner_stub.Insert(iter([good]), metadata=metadata, timeout=30)  # still serving
    assert kept.frames_counted == 64 and kept.receipts[0].shard_id == owner
    until(lambda: client.status().frames == frames + 64, what="the good batch counted")
    run["next_seq"] = seq + 1  # a writer's seq only grows: lower ones would be retries
    channel.close()
    owner_channel.close()


def test_a_writer_poisoned_on_a_shard_writes_on_through_the_driver(run):
    """Seqs sent straight to a shard under a real writer's id poison nothing on the driver path."""
    client = run["client"]
    frames = client.status().frames
    options = {"ca_file": run["ca"], "writer_id": "poisoned"}
    with (
        RelayClient(run["server"].address, token=ACTOR_TOKEN, **options) as poisoner,
        RelayClient(run["server"].address, token=ACTOR_TOKEN, **options) as real,
    ):
        ahead = [poisoner.batch(transitions(8), seq=s) for s in (5, 6, 7, 900)]
        assert poisoner.insert_direct(ahead).frames_counted == 32  # stored as its own writer
        reply = real.insert([real.batch(transitions(8), seq=s) for s in range(8)])  # the driver
    assert [r.duplicate for r in reply.receipts] == [False] * 8 and reply.frames_counted == 64
    until(lambda: client.status().frames == frames + 96, what="both writers counted")


def test_a_long_stream_through_the_driver_holds_flat_memory(run):
    """Over 50 MB in one Insert stream through the driver: its kept state does not grow."""
    from services.grpc.insert import Pending

    arrays = transitions(4000)  # 232 kB, under grpc.max_message_mb=0.25
    held: dict[int, tuple[int, int]] = {}
    with RelayClient(
        run["server"].address, token=ACTOR_TOKEN, ca_file=run["ca"], writer_id="long"
    ) as client:
        size = len(client.batch(arrays, seq=0).SerializeToString())

        def messages():
            for seq in range(220):
                yield client.batch(arrays, seq=seq)
                if seq in (40, 219):
                    alive = sum(type(o) is Pending for o in gc.get_objects())
                    held[seq] = (alive, tracemalloc.get_traced_memory()[0])

        tracemalloc.start()
        try:
            reply = client.experience.Insert(messages(), metadata=client.metadata, timeout=120)
        finally:
            tracemalloc.stop()
    assert reply.frames_counted == 220 * 4000 and 220 * size > 50e6
    assert held[219][0] <= 24, held  # batches in flight and uncounted, not every batch sent
    grown = held[219][1] - held[40][1]
    print(f"driver stream: {220 * size / 1e6:.0f} MB sent, {grown / 1e6:.2f} MB more held")
    assert grown < 3e6, f"{grown / 1e6:.1f} MB more held after {220 * size / 1e6:.0f} MB"


def actor_process(run: dict, frames: int) -> CliRun:
    """The example actor (actor credential, TLS) inserting straight into the shards."""
    return CliRun(
        *("--address", run["server"].address, "--token", ACTOR_TOKEN, "--ca-file", run["ca"]),
        *("--frames", str(frames), "--batch-frames", "128", "--direct", "--weights-every", "2"),
        module="services.external_actor",
    )


def test_checkpoints_cut_while_an_actor_streams_directly_are_consistent(run):
    client = run["client"]
    with actor_process(run, 10_000_000) as actor:
        actor.wait_log("inserted")  # the cuts come while the actor keeps inserting
        first = client.checkpoint()
        frames = consistent_cut(first)
        until(lambda: client.status().frames > frames, what="frames after the first cut")
        assert frames < consistent_cut(client.checkpoint())


def test_a_restarted_shard_serves_direct_writes_again(run):
    controller, client = run["controller"], run["client"]
    old = list(client.route().shard_addresses)
    until(lambda: client.status().frames == controller.counters.transitions, what="the count")
    consistent_cut(client.checkpoint())  # nothing writes now: the refill will hold everything
    killed = ray.get(controller.shards[1].health.remote())
    os.kill(killed["pid"], signal.SIGKILL)
    until(lambda: controller.counters.replay_restarts == 1, 120, "the shard's restart")
    route = until(lambda: (r := client.route()).epoch == 1 and r, 60, "a new route")
    assert route.shard_addresses[0] == old[0] and route.shard_addresses[1] != old[1]
    frames = client.status().frames
    seq = run["next_seq"]
    requests = [client.batch(transitions(50, s), seq=s) for s in range(seq, seq + 16)]
    with socket.socket() as holder:  # bound, never listening: connections are refused
        holder.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{holder.getsockname()[1]}"  # (the old port may serve another now)
        client._route = pb.Route(shard_addresses=[old[0], dead], group=8, epoch=0)  # stale
        reply = client.insert_direct(requests)  # the unreachable shard's go through the driver
    assert reply.frames_counted == 800
    assert {r.shard_id for r in reply.receipts} == {0, 1}
    until(lambda: client.status().frames >= frames + 800, what="the count")
    assert client.route().epoch == 1
    with actor_process(run, 1000) as actor:  # a new actor gets the new route
        summary = actor.summary(timeout=180)
    assert summary["stopped_by"] == "frames" and summary["frames"] >= 1000


def test_a_periodic_checkpoint_on_a_full_disk_leaves_the_run_alive(run):
    controller, client = run["controller"], run["client"]
    root = controller.checkpoints.root
    good = Path(client.checkpoint())
    failures = controller.counters.checkpoint_failures
    refusal = diskfaults.full(root) if run["tmpfs"] else diskfaults.refusing(root)
    with refusal as why:
        controller.cadence.next_frames = controller.counters.collected_frames  # due now
        until(lambda: controller.counters.checkpoint_failures > failures, 60, "the failure")
        code, details = refused(client.checkpoint)  # one asked for fails the same way
        assert code == "INTERNAL" and str(root) in details, (why, details)
        assert client.status().state == "running"
        assert not list(root.glob(".staging-*"))  # the failed cuts left nothing behind
        path, manifest = latest_valid(root)
        assert path == good  # the newest valid checkpoint stays, loadable
        seq = run["next_seq"] + 100
        reply = client.insert_direct([client.batch(transitions(32), seq=seq)])
        assert reply.frames_counted == 32  # the run goes on taking experience
    assert controller.counters.checkpoint_failures == failures + 2
    frames = consistent_cut(client.checkpoint())  # the disk has room again
    assert frames > manifest["counters"]["collected_frames"]


def test_stop_leaves_a_consistent_final_checkpoint(run):
    client = run["client"]
    with actor_process(run, 10_000_000) as actor:
        actor.wait_log("inserted")
        final = client.stop(wait=True)  # while the actor inserts
        summary = actor.summary(timeout=120)
    assert summary["stopped_by"].startswith("run:") and summary["frames"] > 0
    run["trainer"].join(timeout=120)
    assert not run["trainer"].is_alive()
    frames = consistent_cut(final)
    assert frames == run["controller"].counters.collected_frames == run["summary"]["frames"]
    refused_after = refused(lambda: client.insert_direct([client.batch(transitions(8))]))
    assert refused_after[0] == "UNAVAILABLE"


# -- the gate, alone ------------------------------------------------------------------------
def receipt(seq: int) -> ExternalReceipt:
    return ExternalReceipt("w", seq, 10, (), (), None)


def test_the_gate_holds_writes_until_the_driver_opens_it_and_drains_receipts():
    gate = IntakeGate()
    with pytest.raises(TimeoutError):
        gate.enter(timeout=0.05)  # shut until the driver says open
    entered = threading.Event()

    def write():
        gate.enter(timeout=30)
        entered.set()
        gate.leave(receipt(1))

    writer = threading.Thread(target=write)
    writer.start()
    gate.set(open=True, closed=False, total_frames=5)
    writer.join(timeout=30)
    assert entered.is_set() and [r.seq for r in gate.drain(10)] == [1]
    assert gate.drain() == [] and gate.total_frames == 10
    gate.enter(timeout=1)  # in progress across a hold: the hold waits for it
    held: list = []
    holder = threading.Thread(target=lambda: held.extend(gate.hold(timeout=30)))
    holder.start()
    with pytest.raises(TimeoutError):
        gate.enter(timeout=0.05)  # held: nothing new starts
    gate.leave(receipt(2))
    holder.join(timeout=30)
    assert [r.seq for r in held] == [2]
    gate.release()
    gate.enter(timeout=1)
    gate.leave(None)  # a failed write leaves no receipt
    assert gate.drain() == []
    gate.set(open=False, closed=True, total_frames=20)
    with pytest.raises(Exception, match="no more experience"):
        gate.enter(timeout=1)
