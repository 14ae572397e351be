"""The hardened external plane without Ray: TLS, scopes, config, secrets, trusted factories.

Real servers on loopback (the driver's :class:`GrpcServer` before its run starts, and a replay
shard's direct-write server, :func:`tests.shard_server.intake_server`), real clients, real
certificates (made with ``cryptography`` by :func:`services.bench.wire.certs.make_pki`). Writers,
leases and hostile messages: ``tests/test_grpc_writers.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from replay.wire.transport import ServerTls
from services import external_actor
from services.bench.wire.certs import make_pki
from services.config import ConfigError, load_config
from services.config.grpc import GrpcConfig, TlsConfig
from services.driver.inbox import Inbox
from services.grpc import control_pb2 as control_pb
from services.grpc.client import RelayClient
from services.grpc.server import GrpcServer
from tests.grpc_probe import transitions
from tests.shard_server import ACTOR, OPERATOR, SPEC, code_of, intake_server


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


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
