"""No secret in a Ray call argument or an actor's ``GetStatus``: references, read where served.

The options the driver sends each replay shard (``GrpcConfig.shard_intake_options``, pickled
as Ray pickles a call's arguments) hold no token and no key bytes, and a shard's real
direct-write server started from them still serves TLS and both credentials; the actor
credential's ``GetStatus`` holds the env id and the network's shape, no ``env_kwargs`` and no
secret. Real servers and clients on loopback, real certificates, no Ray.
"""

from __future__ import annotations

import json
import os
import pickle
import stat
import threading
from pathlib import Path

import pytest

from replay.intake import start_intake_server
from replay.table import ReplayTable
from replay.wire.secrets import served_options
from services.bench.wire.certs import make_pki
from services.config.grpc import GrpcConfig, TlsConfig
from services.driver.inbox import Inbox
from services.grpc import control_pb2 as control_pb
from services.grpc.client import RelayClient
from services.grpc.server import GrpcServer
from services.grpc.spill import SpilledSecrets
from tests.grpc_probe import transitions
from tests.shard_server import ACTOR, OPERATOR, SPEC, code_of

ACTOR_ENV = "RELAYRL_TEST_SHARD_ACTOR_TOKEN"


def test_shards_get_references_and_still_serve_tls_and_both_credentials(tmp_path, monkeypatch):
    pki = make_pki(tmp_path / "pki")
    token_file = tmp_path / "operator-token"
    token_file.write_text(OPERATOR + "\n")
    monkeypatch.setenv(ACTOR_ENV, ACTOR)
    tls = TlsConfig(pki["server_cert"], pki["server_key"], client_ca_file=pki["ca"])
    config = GrpcConfig(port=0, token=f"file:{token_file}", actor_token=f"env:{ACTOR_ENV}", tls=tls)
    options = config.shard_intake_options()
    sent = pickle.dumps(options)  # the bytes a Ray call argument carries
    key = Path(pki["server_key"]).read_bytes()
    key_line = key.splitlines()[len(key.splitlines()) // 2]  # a line of the key's body
    for secret in (OPERATOR.encode(), ACTOR.encode(), key, key_line):
        assert secret not in sent
    assert options["operator"] == f"file:{token_file}" and options["actor"] == f"env:{ACTOR_ENV}"

    table, lock = ReplayTable(1_000, seed=0), threading.Lock()

    def write(arrays, writer, seq):
        with lock:
            return table.write(arrays, writer, seq)

    served = {**options, "spec": SPEC, "num_shards": 1, "published_version": 0}
    gate, server, address = start_intake_server(write, 0, served, node_ip="127.0.0.1")
    gate.set(open=True, closed=False, total_frames=0, published_version=0)
    signed = {"ca_file": pki["ca"], "cert_file": pki["client_cert"], "key_file": pki["client_key"]}
    try:
        for token in (ACTOR, OPERATOR):
            with RelayClient(address, token=token, **signed) as client:
                reply = client.experience.Insert(
                    iter([client.batch(transitions(8))]), metadata=client.metadata, timeout=30
                )
                assert reply.frames_counted == 8
        assert len(table) == 16
        with RelayClient(address, token="guess", **signed) as client:
            call = lambda: client.experience.Insert(  # noqa: E731
                iter([client.batch(transitions(8))]), metadata=client.metadata, timeout=30
            )
            assert code_of(call)[0] == "UNAUTHENTICATED"
        with RelayClient(address, token=ACTOR) as plain:  # no TLS: no handshake
            call = lambda: plain.experience.Insert(  # noqa: E731
                iter([plain.batch(transitions(8))]), metadata=plain.metadata, timeout=30
            )
            assert code_of(call)[0] == "UNAVAILABLE"
        assert len(table) == 16
    finally:
        server.stop(0)

    # A reference the shard's node cannot read fails its start, naming the field.
    monkeypatch.delenv(ACTOR_ENV)
    with pytest.raises(ValueError, match=f"grpc.actor_token: environment variable {ACTOR_ENV}"):
        served_options(options)


def test_literal_secrets_reach_shards_as_private_files_only():
    config = GrpcConfig(token=OPERATOR, actor_token=ACTOR)  # literals: loopback only
    with pytest.raises(ValueError, match="token: a literal secret is never sent to a shard"):
        config.shard_intake_options()
    spilled = SpilledSecrets(config)
    try:
        options = config.shard_intake_options(spilled.refs)
        sent = pickle.dumps(options)
        assert OPERATOR.encode() not in sent and ACTOR.encode() not in sent
        for ref in (options["operator"], options["actor"]):
            assert stat.S_IMODE(os.stat(ref.removeprefix("file:")).st_mode) == 0o600
        resolved = served_options(options)  # what the shard reads on its node
        assert (resolved["operator"], resolved["actor"]) == (OPERATOR, ACTOR)
    finally:
        spilled.close()
    assert not os.path.exists(options["operator"].removeprefix("file:"))


def test_an_actor_status_holds_what_an_actor_needs_and_no_env_kwargs_or_secret():
    run_config = {
        "collector": {
            "env_id": "CartPole-v1",
            "env_kwargs": {"api_key": "env-kwarg-secret"},
            "n_step": 3,
            "gamma": 0.99,
        },
        "learner": {"hidden_sizes": [64, 64]},
        "grpc": {"port": 0, "token": "file:/run/secrets/operator", "actor_token": ACTOR},
        "checkpoint": {"signing_key": "env:SIGNING_KEY_VARIABLE"},
    }
    config = GrpcConfig(port=0, token=OPERATOR, actor_token=ACTOR)
    server = GrpcServer(config, Inbox(), spec=SPEC, run_config=run_config)
    try:
        seen = {}
        for scope, token in (("actor", ACTOR), ("operator", OPERATOR)):
            with RelayClient(server.address, token=token) as client:
                status = client.control.GetStatus(
                    control_pb.GetStatusRequest(), metadata=client.metadata
                )
            seen[scope] = status.config_json
    finally:
        server.stop()
    assert json.loads(seen["actor"]) == {
        "collector": {"env_id": "CartPole-v1", "n_step": 3, "gamma": 0.99},
        "learner": {"hidden_sizes": [64, 64]},
        "replay": {},  # a recurrent run's sequence layout (replay.sequence_*) would be here
    }
    operator = json.loads(seen["operator"])  # the operator's view: all of it, secrets hidden
    assert operator["collector"]["env_kwargs"] == {"api_key": "env-kwarg-secret"}
    for secret in (ACTOR, OPERATOR, "/run/secrets/operator", "SIGNING_KEY_VARIABLE"):
        assert secret not in seen["operator"] and secret not in seen["actor"]
