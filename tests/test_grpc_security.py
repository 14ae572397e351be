"""The hardened external plane without Ray: TLS, scopes, leases, hostile input, binding, config.

Real servers on loopback (the driver's :class:`GrpcServer` before its run starts, and a replay
shard's direct-write server over a real :class:`ReplayTable`), real clients, real certificates
(made with ``cryptography`` by :func:`services.bench.wire.certs.make_pki`).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

import replay.persist.checkpoint
import replay.table
from replay.intake import start_intake_server
from replay.table import ReplayTable
from replay.wire.leases import Refused, WriterLeases
from replay.wire.transport import ServerTls
from services import external_actor
from services.bench.wire.certs import make_pki
from services.config import ConfigError, load_config
from services.config.grpc import GrpcConfig, TlsConfig
from services.driver.inbox import Inbox
from services.grpc import control_pb2 as control_pb
from services.grpc.client import RelayClient
from services.grpc.server import GrpcServer
from services.grpc.transitions import env_transition_spec
from tests.grpc_probe import transitions
from tests.test_wire import field, varint

SPEC = env_transition_spec("CartPole-v1")
OPERATOR, ACTOR = "operator-secret", "actor-secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def code_of(call) -> tuple[str, str]:
    try:
        call()
    except grpc.RpcError as err:
        return err.code().name, err.details() or ""
    return "OK", ""


# -- TLS ---------------------------------------------------------------------------------------
def test_tls_and_mutual_tls_handshakes_on_every_listener(pki):
    tls = TlsConfig(cert_file=pki["server_cert"], key_file=pki["server_key"])
    server = GrpcServer(GrpcConfig(port=0, token=OPERATOR, tls=tls), Inbox(), spec=SPEC)
    try:
        with RelayClient(server.address, token=OPERATOR, ca_file=pki["ca"]) as client:
            assert client.status().state == "starting"  # a TLS handshake and a call
            assert client.health() == "NOT_SERVING"
        with RelayClient(server.address, token=OPERATOR) as plain:
            assert code_of(plain.status)[0] == "UNAVAILABLE"  # no plaintext on a TLS port
        with RelayClient(server.address, token=OPERATOR, ca_file=pki["other_ca"]) as wrong:
            assert code_of(wrong.status)[0] == "UNAVAILABLE"  # a server it cannot verify
    finally:
        server.stop()
    mutual = TlsConfig(pki["server_cert"], pki["server_key"], client_ca_file=pki["ca"])
    server = GrpcServer(GrpcConfig(port=0, token=OPERATOR, tls=mutual), Inbox(), spec=SPEC)
    try:
        cases = {
            "no client certificate": {},
            "another CA's": {"cert_file": pki["other_cert"], "key_file": pki["other_key"]},
        }
        for name, files in cases.items():
            with RelayClient(server.address, token=OPERATOR, ca_file=pki["ca"], **files) as c:
                assert code_of(c.status)[0] == "UNAVAILABLE", name
        signed = {"cert_file": pki["client_cert"], "key_file": pki["client_key"]}
        with RelayClient(server.address, token=OPERATOR, ca_file=pki["ca"], **signed) as client:
            assert client.status().state == "starting"
    finally:
        server.stop()
    # A replay shard's direct-write server listens with the same TLS.
    table, _, shard, address = intake_server(
        tls=ServerTls.from_files(pki["server_cert"], pki["server_key"], pki["ca"])
    )
    try:
        with RelayClient(address, token=ACTOR, ca_file=pki["ca"], **signed) as client:
            reply = client.experience.Insert(
                iter([client.batch(transitions(8))]), metadata=client.metadata, timeout=30
            )
            assert reply.frames_counted == 8 and len(table) == 8
        with RelayClient(address, token=ACTOR, ca_file=pki["ca"]) as client:
            call = lambda: client.experience.Insert(  # noqa: E731
                iter([client.batch(transitions(8))]), metadata=client.metadata, timeout=30
            )
            assert code_of(call)[0] == "UNAVAILABLE" and len(table) == 8
    finally:
        shard.stop(0)


# -- scopes ------------------------------------------------------------------------------------
def test_each_scope_may_make_its_calls_and_no_others():
    config = GrpcConfig(port=0, token=OPERATOR, actor_token=ACTOR)
    server = GrpcServer(config, Inbox(), spec=SPEC)
    reflection = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
    try:
        results = {}
        for scope, token in (
            ("operator", OPERATOR),
            ("actor", ACTOR),
            ("none", None),
            ("wrong", "guess"),
        ):
            with RelayClient(server.address, token=token) as client:
                reflect = client.channel.stream_stream(reflection)
                results[scope] = {
                    "GetStatus": code_of(client.status)[0],
                    "GetWeights": code_of(client.get_weights)[0],
                    "GetRoute": code_of(client.route)[0],
                    "Insert": code_of(lambda c=client: c.insert([transitions(4)]))[0],
                    "Checkpoint": code_of(client.checkpoint)[0],
                    "Reflection": code_of(
                        lambda c=client, r=reflect: list(
                            r(iter([b""]), metadata=c.metadata, timeout=10)
                        )
                    )[0],
                    "Health": client.health(),
                }
        with RelayClient(server.address, token=ACTOR) as actor:
            denied = code_of(lambda: actor.stop(wait=False))
    finally:
        server.stop()
    # The run has not started: allowed calls reach their handler (Insert: UNAVAILABLE, no
    # replay yet; Checkpoint: FAILED_PRECONDITION), refused ones never do.
    allowed = {"GetStatus": "OK", "GetWeights": "OK", "GetRoute": "OK", "Insert": "UNAVAILABLE"}
    assert results["operator"] == {
        **allowed,
        "Checkpoint": "FAILED_PRECONDITION",
        "Reflection": "OK",
        "Health": "NOT_SERVING",
    }
    assert results["actor"] == {
        **allowed,
        "Checkpoint": "PERMISSION_DENIED",
        "Reflection": "PERMISSION_DENIED",
        "Health": "NOT_SERVING",
    }
    assert denied[0] == "PERMISSION_DENIED" and "grpc.token" in denied[1]
    for scope in ("none", "wrong"):
        calls = {k: v for k, v in results[scope].items() if k != "Health"}
        assert set(calls.values()) == {"UNAUTHENTICATED"}, (scope, calls)
        assert results[scope]["Health"] == "NOT_SERVING"


# -- a shard's server over a real table -------------------------------------------------------
def intake_server(
    *,
    tls=None,
    max_workers: int = 8,
    idle_s=None,
    host="127.0.0.1",
    node_ip="127.0.0.1",
    published_version=0,
    calls_per_peer=None,
):
    table = ReplayTable(10_000, seed=0)
    lock = threading.Lock()

    def write(arrays, writer, seq):
        with lock:
            return table.write(arrays, writer, seq)

    options = {
        "spec": SPEC,
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


def test_writer_ids_belong_to_their_caller_and_seq_may_not_jump(shard):
    table = shard["table"]
    with (
        RelayClient(shard["address"], token=ACTOR, writer_id="robot") as owner,
        RelayClient(shard["address"], token=ACTOR, writer_id="robot") as impostor,
    ):
        first = [owner.batch(transitions(10, s), seq=s) for s in (0, 1)]
        assert insert(owner, *first)[0] == "OK" and len(table) == 20
        # Same credential, another client: the writer id is not its to use, at any seq.
        for seq in (2, 10**15):
            code, details, _ = insert(impostor, impostor.batch(transitions(10), seq=seq))
            assert code == "PERMISSION_DENIED" and "writer_id:" in details, details
        # The owner itself may not jump far ahead either (it would make later batches retries).
        code, details, _ = insert(owner, owner.batch(transitions(10), seq=10**15))
        assert code == "INVALID_ARGUMENT" and details.startswith("seq:"), details
        assert len(table) == 20
        code, _, retry = insert(owner, *first)  # honest retries stay duplicates
        assert code == "OK" and [r.duplicate for r in retry.receipts] == [True, True]
        code, _, reply = insert(owner, owner.batch(transitions(10, 2), seq=2))
        assert code == "OK" and reply.frames_counted == 10 and len(table) == 30
        # A client that takes over a writer id on purpose passes its lease.
        with RelayClient(
            shard["address"], token=ACTOR, writer_id="robot", lease=owner.lease
        ) as heir:
            assert insert(heir, heir.batch(transitions(10, 3), seq=3))[0] == "OK"
    receipts = shard["gate"].drain()
    assert [r.seq for r in receipts if r.frames] == [0, 1, 2, 3]  # only what was stored counts


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
    # 2 Insert streams (one peer may hold up to 8 calls here)
    table, _, server, address = intake_server(max_workers=4, idle_s=0.5, calls_per_peer=8)
    release = threading.Event()
    try:
        with RelayClient(address, token=ACTOR) as client:

            def idle():
                release.wait(30)
                yield client.batch(transitions(4))

            held = [
                client.experience.Insert.future(idle(), metadata=client.metadata, timeout=30)
                for _ in range(2)
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
    with pytest.raises(Refused, match="2 writers hold leases") as full:
        leases.admit("c", 0, owner="z", frames=1)
    assert full.value.code == "RESOURCE_EXHAUSTED"
    now[0] = 20.0  # both idle past their lease: expired, the book is bounded
    leases.admit("c", 0, owner="z", frames=1)
    leases.admit("a", 0, owner="w", frames=1)  # a new owner, a new window from -1
    assert len(leases) == 2


# -- config ------------------------------------------------------------------------------------
def test_config_refuses_exposure_without_tls_and_literal_secrets_beyond_loopback(
    pki, tmp_path, monkeypatch
):
    monkeypatch.setenv("RELAYRL_OP", OPERATOR)
    exposed = ["grpc.port=0", "grpc.host=0.0.0.0", "grpc.token=env:RELAYRL_OP"]
    with pytest.raises(ConfigError, match=r"^grpc\.tls: required when the server binds beyond"):
        load_config(overrides=exposed)
    assert load_config(overrides=[*exposed, "grpc.allow_plaintext=true"]).grpc.allow_plaintext
    tls = [f"grpc.tls.cert_file={pki['server_cert']}", f"grpc.tls.key_file={pki['server_key']}"]
    assert load_config(overrides=[*exposed, *tls]).grpc.tls.enabled
    secret_file = tmp_path / "actor.secret"
    secret_file.write_text(ACTOR + "\n")
    config = load_config(overrides=[*exposed, *tls, f"grpc.actor_token=file:{secret_file}"])
    assert config.grpc.resolved_actor_token() == ACTOR
    refusals = {
        r"^grpc\.token: a literal secret is accepted only on loopback": [
            "grpc.port=0",
            "grpc.host=0.0.0.0",
            "grpc.token=literal",
            *tls,
        ],
        r"^grpc\.token: <redacted> stands for a secret": ["grpc.port=0", "grpc.token=<redacted>"],
        r"^grpc\.actor_token: needs grpc\.token": ["grpc.port=0", "grpc.actor_token=a"],
        r"^grpc\.actor_token: must differ": ["grpc.port=0", "grpc.token=a", "grpc.actor_token=a"],
        r"^grpc\.actor_token: cannot read the secret file": [
            "grpc.port=0",
            "grpc.token=a",
            f"grpc.actor_token=file:{tmp_path}/missing",
        ],
        r"^grpc\.tls\.key_file: cert_file and key_file go together": [
            "grpc.port=0",
            f"grpc.tls.cert_file={pki['server_cert']}",
        ],
        r"^grpc\.tls\.cert_file: cannot read": [
            "grpc.port=0",
            f"grpc.tls.cert_file={tmp_path}/none.pem",
            f"grpc.tls.key_file={pki['server_key']}",
        ],
        r"^grpc\.writer_frames_per_s: must be > 0": ["grpc.port=0", "grpc.writer_frames_per_s=0"],
    }
    for pattern, overrides in refusals.items():
        with pytest.raises(ConfigError, match=pattern):
            load_config(overrides=overrides)


def test_literal_secrets_are_never_written(tmp_path):
    config = load_config(
        overrides=["grpc.port=0", f"grpc.token={OPERATOR}", f"grpc.actor_token={ACTOR}"]
    )
    text = json.dumps(config.to_dict())
    assert OPERATOR not in text and ACTOR not in text and text.count("<redacted>") == 2
    assert config.grpc.resolved_token() == OPERATOR  # the server still knows it


# -- the external actor trusts only its host ----------------------------------------------------
def hostile_factory(**kwargs):
    """What a spoofed server would have the actor call: it leaves a mark."""
    Path(os.environ["RELAYRL_TEST_MARK"]).write_text("called")
    raise RuntimeError("must never be called")


def test_the_external_actor_refuses_a_factory_its_server_names(tmp_path, monkeypatch, capsys):
    mark = tmp_path / "mark"
    monkeypatch.setenv("RELAYRL_TEST_MARK", str(mark))
    for env_id in ("tests.test_grpc_security:hostile_factory", "os:system", "NotRegistered-v0"):
        run_config = {
            "collector": {"env_id": env_id, "env_kwargs": {}, "n_step": 1, "gamma": 0.99},
            "learner": {"hidden_sizes": [8]},
        }
        server = GrpcServer(GrpcConfig(port=0), Inbox(), spec=SPEC, run_config=run_config)
        try:
            code = external_actor.main(["--address", server.address, "--frames", "8"])
        finally:
            server.stop()
        err = capsys.readouterr().err
        assert code == 2 and "refused" in err and env_id in err, (env_id, err)
    assert not mark.exists()  # the server-named factory was never called


def test_control_status_reports_the_config_without_secrets(tmp_path):
    secret = tmp_path / "secret-actor-token"
    secret.write_text("actor-token-in-a-file\n")
    config_dict = load_config(
        overrides=[
            "grpc.port=0",
            f"grpc.token={OPERATOR}",
            f"grpc.actor_token=file:{secret}",
            "checkpoint.signing_key=env:SIGNING_KEY_VARIABLE",
        ]
    ).to_dict()
    server = GrpcServer(
        GrpcConfig(port=0, token=OPERATOR), Inbox(), spec=SPEC, run_config=config_dict
    )
    try:
        with RelayClient(server.address, token=OPERATOR) as client:
            status = client.control.GetStatus(
                control_pb.GetStatusRequest(), metadata=client.metadata
            )
        assert OPERATOR not in status.config_json and "<redacted>" in status.config_json
        # Nor where the other secrets live.
        assert "secret-actor-token" not in status.config_json
        assert "SIGNING_KEY_VARIABLE" not in status.config_json
    finally:
        server.stop()


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
