"""gRPC pieces without Ray: the transition spec, batch checks, codecs, config, auth, health."""

from __future__ import annotations

import grpc
import gymnasium as gym
import numpy as np
import pytest
import torch
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from collector.envs.vector import make_vector_env
from collector.networks.q_mlp import ModelSpec
from collector.rollout import RolloutWorker
from replay.wire import experience_pb2 as pb
from replay.wire.batches import (
    BatchError,
    check_episodes,
    check_meaning,
    check_writer,
    decode_batch,
    transition_spec,
)
from replay.wire.codecs import decode_state_dict, encode_arrays, encode_state_dict
from services import train
from services.config import ConfigError, load_config
from services.config.grpc import GrpcConfig
from services.driver.inbox import Inbox
from services.grpc.client import RelayClient
from services.grpc.server import GrpcServer, redacted_config
from services.grpc.transitions import env_transition_spec

SPEC = env_transition_spec("CartPole-v1")


def collector_batch(n_step: int = 3) -> dict[str, np.ndarray]:
    """What a collector writes for CartPole (the reference the spec must match)."""
    spec = ModelSpec(4, 2)
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    worker = RolloutWorker(make_vector_env("CartPole-v1", 2), policy, [1, 2], n_step=n_step)
    return worker.rollout(num_steps=40, explore=0.5, policy_version=3).transitions


def tensors(arrays) -> list[pb.Tensor]:
    return [
        pb.Tensor(key=k, dtype=d, shape=s, data=b)
        for k, d, s, b in encode_arrays(arrays)
    ]  # fmt: skip


def test_spec_from_spaces_matches_what_collectors_write():
    batch = collector_batch()
    assert list(batch) == list(SPEC.tensors)
    for key, array in batch.items():
        assert (array.dtype.name, array.shape[1:]) == (
            SPEC.tensors[key].dtype,
            SPEC.tensors[key].shape,
        ), key
    assert SPEC.num_actions == 2
    decoded = decode_batch(tensors(batch), SPEC, max_bytes=1 << 20)
    for key, array in batch.items():
        np.testing.assert_array_equal(decoded[key], array)
        assert not decoded[key].flags.writeable  # a view of the message's bytes, no copy


def _bad(batch, **changes):
    items = tensors(batch)
    for message in items:
        for field, value in changes.get(message.key, {}).items():
            if field == "shape":
                del message.shape[:]
                message.shape.extend(value)
            else:
                setattr(message, field, value)
    return items


@pytest.mark.parametrize(
    "case, named",
    [
        ("unknown_key", "'extra'"),
        ("twice", "'reward'"),
        ("unknown_dtype", "'observation'"),
        ("wrong_dtype", "'action'"),
        ("wrong_shape", "'observation'"),
        ("short_bytes", "'reward'"),
        ("missing", "'terminated'"),
        ("sizes_differ", "'action'"),
        ("nan", "'reward'"),
        ("inf", "'next_observation'"),
        ("action_range", "'action'"),
        ("too_large", "grpc.max_message_mb"),
    ],
)
def test_bad_batches_are_refused_naming_the_key(case, named):
    batch = collector_batch()
    n = len(batch["reward"])
    max_bytes = 1 << 20
    if case == "unknown_key":
        items = tensors({**batch, "extra": np.zeros(n, np.float32)})
    elif case == "twice":
        items = tensors(batch) + tensors({"reward": batch["reward"]})
    elif case == "unknown_dtype":
        items = _bad(batch, observation={"dtype": "complex64"})
    elif case == "wrong_dtype":
        items = tensors({**batch, "action": batch["action"].astype(np.int32)})
    elif case == "wrong_shape":
        items = tensors({**batch, "observation": np.zeros((n, 2, 2), np.float32)})
    elif case == "short_bytes":
        items = _bad(batch, reward={"data": batch["reward"].tobytes()[:-4]})
    elif case == "missing":
        items = tensors({k: v for k, v in batch.items() if k != "terminated"})
    elif case == "sizes_differ":
        items = tensors({**batch, "action": batch["action"][:-1]})
    elif case == "nan":
        reward = batch["reward"].copy()
        reward[1] = np.nan
        items = tensors({**batch, "reward": reward})
    elif case == "inf":
        nxt = batch["next_observation"].copy()
        nxt[0, 0] = np.inf
        items = tensors({**batch, "next_observation": nxt})
    elif case == "action_range":
        action = batch["action"].copy()
        action[0] = 2
        items = tensors({**batch, "action": action})
    else:
        items, max_bytes = tensors(batch), 100
    with pytest.raises(BatchError, match=named):
        decode_batch(items, SPEC, max_bytes=max_bytes)


def test_writer_ids_and_sequence_numbers():
    assert check_writer("robot-1", 0) == "external/robot-1"
    for writer, seq, field in (("", 0, "writer_id"), ("x" * 200, 0, "writer_id"), ("a", -1, "seq")):
        with pytest.raises(BatchError, match=field):
            check_writer(writer, seq)


def test_fields_that_carry_meaning_are_range_checked():
    batch = collector_batch()
    assert check_meaning(dict(batch), SPEC, max_version=3) is not None
    cases = {
        "n_step_discount": {
            **batch,
            "n_step_discount": np.full_like(batch["n_step_discount"], 1.5),
        },
        "policy_version": {**batch, "policy_version": np.full_like(batch["policy_version"], 4)},
        "policy_version ": {**batch, "policy_version": np.full_like(batch["policy_version"], -2)},
    }
    for named, arrays in cases.items():
        with pytest.raises(BatchError, match=f"key '{named.strip()}'"):
            check_meaning(arrays, SPEC, max_version=3)
    for returns, lengths, named in (
        ([float("nan")], [3], "episode_returns"),
        ([float("inf")], [3], "episode_returns"),
        ([1.0], [0], "episode_lengths"),
        ([1.0], [], "episode_lengths"),
    ):
        with pytest.raises(BatchError, match=f"^{named}:"):
            check_episodes(returns, lengths)
    check_episodes([1.0, -2.5], [1, 500])


def test_box_actions_lie_in_the_action_space_or_are_clipped_when_asked():
    space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    spec = transition_spec(gym.spaces.Box(-1, 1, (3,), np.float32), space)
    assert spec.action_low == (-2.0,) and spec.action_high == (2.0,)
    arrays = {"action": np.array([[0.5], [2.5], [-3.0]], np.float32)}
    with pytest.raises(BatchError, match="key 'action': 2 values outside the action space"):
        check_meaning(arrays, spec)
    clipped = check_meaning(arrays, spec, clip_actions=True)["action"]
    np.testing.assert_array_equal(clipped, [[0.5], [2.0], [-2.0]])
    assert arrays["action"][1, 0] == 2.5  # the received batch is not written to


def test_error_messages_cut_the_strings_they_echo():
    with pytest.raises(BatchError) as err:
        check_writer("w" * 5000, 0)
    assert len(str(err.value)) < 200 and "5000 characters" in str(err.value)
    items = tensors(collector_batch())
    items[0].key = "k" * 100_000
    with pytest.raises(BatchError) as err:
        decode_batch(items, SPEC, max_bytes=1 << 20)
    assert len(str(err.value)) < 600


def test_state_dict_round_trip():
    network = ModelSpec(4, 2, (8,)).build()
    metas, blob = encode_state_dict(network.state_dict())
    heads = [pb.Tensor(key=k, dtype=d, shape=s) for k, d, s in metas]
    state = decode_state_dict(heads, bytearray(blob))
    for key, tensor in network.state_dict().items():
        assert torch.equal(state[key], tensor), key
    with pytest.raises(BatchError, match="truncated"):
        decode_state_dict(heads, bytearray(blob[:-4]))


def test_config_names_the_grpc_fields(monkeypatch):
    assert load_config(overrides=["grpc.port=0"]).grpc.enabled
    with pytest.raises(ConfigError, match=r"^grpc\.token: required when the server binds beyond"):
        load_config(overrides=["grpc.port=0", "grpc.host=0.0.0.0"])
    monkeypatch.setenv("RELAYRL_TEST_TOKEN", "from-env")
    exposed = ["grpc.port=0", "grpc.host=0.0.0.0", "grpc.token=env:RELAYRL_TEST_TOKEN"]
    assert load_config(overrides=[*exposed, "grpc.allow_plaintext=true"]).grpc.token
    monkeypatch.delenv("RELAYRL_TEST_TOKEN")
    with pytest.raises(ConfigError, match=r"^grpc\.direct_writes: needs the gRPC server"):
        load_config(overrides=["grpc.direct_writes=true"])
    assert load_config(overrides=["grpc.port=0", "grpc.direct_writes=true"]).grpc.direct_writes
    with pytest.raises(ConfigError, match=r"^grpc\.port: must be in"):
        load_config(overrides=["grpc.port=70000"])
    with pytest.raises(ConfigError, match=r"^collector\.num_collectors: 0 needs external"):
        load_config(overrides=["collector.num_collectors=0"])
    monkeypatch.delenv("RELAYRL_TEST_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"^grpc\.token: environment variable RELAYRL_TEST"):
        load_config(overrides=["grpc.port=0", "grpc.token=env:RELAYRL_TEST_TOKEN"])
    monkeypatch.setenv("RELAYRL_TEST_TOKEN", "from-env")
    config = load_config(overrides=["grpc.port=0", "grpc.token=env:RELAYRL_TEST_TOKEN"])
    assert config.grpc.resolved_token() == "from-env"
    assert redacted_config({"grpc": {"token": "s3cret"}})["grpc"]["token"] == "<redacted>"


def test_cli_refuses_an_open_host_without_token(capsys):
    # The CLI's main in this process: a unit test, failed by its guard if Ray starts.
    assert train.main(["--set", "grpc.port=0", "--set", "grpc.host=0.0.0.0"]) == 2
    assert "grpc.token: required" in capsys.readouterr().err


@pytest.fixture
def bare_server():
    """A server whose run has not started (no Ray): health NOT_SERVING, no replay yet."""
    server = GrpcServer(GrpcConfig(port=0, token="t0k"), Inbox(), spec=SPEC, run_name="bare")
    yield server
    server.stop()


def test_auth_health_and_reflection_before_the_run_starts(bare_server):
    address = bare_server.address
    with RelayClient(address, token="t0k") as client:
        assert client.health() == "NOT_SERVING"
        assert client.status().state == "starting"
        with pytest.raises(grpc.RpcError) as refused:
            client.insert([collector_batch()])
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    for token in (None, "wrong"):
        with RelayClient(address, token=token) as client, pytest.raises(grpc.RpcError) as err:
            client.status()
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    open_server = GrpcServer(GrpcConfig(port=0), Inbox(), spec=SPEC)
    try:
        with grpc.insecure_channel(open_server.address) as channel:
            services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
        assert {"relayrl.v1.Control", "relayrl.v1.Experience", "grpc.health.v1.Health"} <= services
    finally:
        open_server.stop()
