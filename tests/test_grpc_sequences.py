"""Sequences over the gRPC plane (#39): a recurrent run's external actors write R2D2 items.

Sequences cut by the collectors' own :class:`~collector.sequence_worker.SequenceWorker` travel
through a real client to a replay shard's direct-write server over a real table
(:func:`tests.shard_server.intake_server`), stored bit-identical and counted once per step;
malformed ones are refused naming the field; the end-to-end test feeds a CLI r2d2 run with no
collectors from ``python -m services.external_actor``.
"""

from __future__ import annotations

import json
import re
import subprocess

import gymnasium as gym
import numpy as np
import pytest

from collector.envs.spaces import describe
from collector.envs.vector import make_vector_env
from collector.networks.recurrent import RecurrentQSpec
from collector.sequence_worker import SequenceWorker
from replay.wire.batches import BatchError, transition_spec
from replay.wire.sequences import NEW_STEPS, check_sequences, empty_sequences, sequence_spec
from services.grpc.client import RelayClient
from services.grpc.transitions import env_transition_spec
from tests.cli_run import CliRun
from tests.conftest import PYTHON, ROOT, cli_env
from tests.grpc_probe import transitions
from tests.shard_server import ACTOR, intake_server
from tests.test_grpc_writers import insert

ENV = "relayrl:StatelessCartPole-v1"
LENGTH, OVERLAP, BURN_IN, HIDDEN = 8, 4, 2, 6  # a GRU: its state is its 6 units
SPEC = sequence_spec(
    env_transition_spec(ENV), length=LENGTH, overlap=OVERLAP, burn_in=BURN_IN, state_size=HIDDEN
)


def collected(rollouts: int = 3, seed: int = 0) -> tuple[list, int]:
    """Rollouts of the collectors' cutter (each item with its new steps); all steps taken."""
    envs = make_vector_env(ENV, 2)
    network = RecurrentQSpec(
        describe(envs.single_observation_space), num_actions=2, recurrent="gru",
        recurrent_hidden_size=HIDDEN,
    )  # fmt: skip
    policy = network.make_policy(network.build(), np.random.SeedSequence(seed))
    worker = SequenceWorker(
        envs, policy, [seed, seed + 1], length=LENGTH, overlap=OVERLAP, burn_in=BURN_IN,
        new_steps=True,
    )  # fmt: skip
    batches = [worker.rollout(24, 1.0, policy_version=0) for _ in range(rollouts)]
    envs.close()
    return [b for b in batches if b.frames], int(worker.written_steps)


def test_a_dict_observation_is_one_sequence_field_per_key():
    space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-1, 1, (3,)), "image": gym.spaces.Box(0, 255, (4, 4), np.uint8)}
    )
    steps = transition_spec(space, gym.spaces.Discrete(3))
    spec = sequence_spec(steps, length=4, overlap=2, state_size=5)
    assert {k: (t.dtype, t.shape) for k, t in spec.tensors.items() if "observation" in k} == {
        "observation.pos": ("float32", (5, 3)),
        "observation.image": ("uint8", (5, 4, 4)),
    }
    items = empty_sequences(spec, 1)
    items["valid"][0, :2], items["truncated"][0, 1], items[NEW_STEPS][0] = True, True, 2
    items["observation.image"][0, :3] = 7  # o_0, o_1 and the next observation o_2
    assert check_sequences(items, spec)[1] == 2
    items["observation.image"][0, 3] = 7
    with pytest.raises(BatchError, match=r"^key 'observation.image': item 0 is not zero"):
        check_sequences(items, spec)


@pytest.fixture
def shard():
    table, gate, server, address = intake_server(spec=SPEC)
    yield {"table": table, "gate": gate, "address": address}
    server.stop(0)


def test_the_wire_spec_is_what_collectors_write():
    batches, written = collected()
    items = batches[0].transitions
    assert list(items) == list(SPEC.tensors)
    for key, tensor in SPEC.tensors.items():
        assert (items[key].dtype.name, items[key].shape[1:]) == (tensor.dtype, tensor.shape), key
    assert sum(int(b.transitions[NEW_STEPS].sum()) for b in batches) == written
    assert sum(b.frames for b in batches) == written
    stored, frames = check_sequences(items, SPEC)
    assert NEW_STEPS not in stored and frames == batches[0].frames


def test_sequences_round_trip_bit_identical_and_each_step_counts_once(shard):
    table = shard["table"]
    batches, written = collected()
    steps = np.concatenate([b.transitions["valid"].sum(axis=1) for b in batches])
    new = np.concatenate([b.transitions[NEW_STEPS] for b in batches])
    assert (new < steps).any() and (new == steps).any()  # overlapping and fresh sequences
    with RelayClient(shard["address"], token=ACTOR, writer_id="robot") as client:
        requests = [
            client.batch(b.transitions, episode_returns=b.episode_returns,
                         episode_lengths=b.episode_lengths)
            for b in batches
        ]  # fmt: skip
        code, details, reply = insert(client, *requests)
        assert code == "OK", details
        assert reply.frames_counted == written < int(steps.sum())
        assert [r.items for r in reply.receipts] == [len(b.transitions["valid"]) for b in batches]
        stored = table.storage.gather(np.arange(len(table)))
        assert list(stored) == [k for k in SPEC.tensors if k != NEW_STEPS]
        for key, column in stored.items():
            sent = np.concatenate([b.transitions[key] for b in batches])
            assert column.dtype == sent.dtype and column.tobytes() == sent.tobytes(), key
        code, _, retry = insert(client, *requests)  # a retry: acknowledged, stored once
        assert code == "OK" and retry.frames_counted == 0
        assert all(r.duplicate for r in retry.receipts) and len(table) == len(steps)
    receipts = shard["gate"].drain()
    assert sum(r.frames for r in receipts) == written
    returns = [x for r in receipts for x in r.episode_returns]
    assert returns == [x for b in batches for x in b.episode_returns] and returns


def _full_row(items) -> int:
    """An item with every step valid that does not end its episode."""
    done = items["terminated"] | items["truncated"]
    return int(np.flatnonzero(items["valid"].all(axis=1) & ~done.any(axis=1))[0])


def _short_row(items) -> int:
    """An item padded after its episode's end."""
    return int(np.flatnonzero(~items["valid"].all(axis=1))[0])


def _set(key, value, row=None):
    def change(items):
        at = slice(None) if row is None else row(items)
        items[key][at] = value

    return change


def _cross(items):
    items["terminated"][_full_row(items), 1] = True


def _gap(items):
    items["valid"][_full_row(items), 2] = False


def _open_short(items):
    row = _full_row(items)
    for key in ("valid", "action", "reward"):
        items[key][row, -1] = 0
    items["observation"][row, -1] = 0
    items[NEW_STEPS][row] = min(items[NEW_STEPS][row], LENGTH - 1 - OVERLAP)


def _wide_state(items):
    items["recurrent_state"] = np.zeros((len(items["valid"]), HIDDEN + 1), np.float32)


def _nan_state(items):
    items["recurrent_state"][0, 0] = np.nan


def _short_observations(items):
    items["observation"] = np.ascontiguousarray(items["observation"][:, :LENGTH])


def _long(items):
    items["valid"] = np.concatenate([items["valid"], items["valid"][:, -1:]], axis=1)


def _inflated(items):
    items[NEW_STEPS][_full_row(items)] = LENGTH + 1


def _no_new_steps(items):
    del items[NEW_STEPS]


MALFORMED = {
    "crosses an episode boundary": (_cross, "terminated"),
    "valid after padding": (_gap, "valid"),
    "short without an episode end": (_open_short, "valid"),
    "reward on padding": (_set("reward", 1.0, _short_row), "reward"),
    "action on padding": (_set("action", 1, _short_row), "action"),
    "observation after the last": (_set("observation", 0.5, _short_row), "observation"),
    "burn-in not the run's": (_set("burn_in", BURN_IN + 1), "burn_in"),
    "state of another size": (_wide_state, "recurrent_state"),
    "state not finite": (_nan_state, "recurrent_state"),
    "L observations": (_short_observations, "observation"),
    "longer than sequence_length": (_long, "valid"),
    "more new steps than steps": (_inflated, NEW_STEPS),
    "no new steps": (_set(NEW_STEPS, 0), NEW_STEPS),
    "new steps missing": (_no_new_steps, NEW_STEPS),
    "action out of range": (_set("action", 2, _full_row), "action"),
    "policy version from the future": (_set("policy_version", 7), "policy_version"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_sequences_are_refused_naming_the_field(shard, case):
    change, named = MALFORMED[case]
    batch = collected(rollouts=2)[0][-1]
    items = {key: value.copy() for key, value in batch.transitions.items()}
    change(items)
    with RelayClient(shard["address"], token=ACTOR) as client:
        code, details, _ = insert(client, client.batch(items, seq=0))
    assert code == "INVALID_ARGUMENT" and f"'{named}'" in details, details
    assert len(shard["table"]) == 0


def test_transitions_and_unproven_episodes_are_refused_by_a_sequence_run(shard):
    batch = collected(rollouts=2)[0][-1]
    with RelayClient(shard["address"], token=ACTOR) as client:
        code, details, _ = insert(client, client.batch(transitions(4), seq=0))
        assert code == "INVALID_ARGUMENT" and "key 'observation'" in details, details
        ends = int((batch.transitions["terminated"] | batch.transitions["truncated"]).any(1).sum())
        boast = client.batch(batch.transitions, seq=0, episode_returns=[9.0] * (ends + 1),
                             episode_lengths=[9] * (ends + 1))  # fmt: skip
        code, details, _ = insert(client, boast)
        assert code == "INVALID_ARGUMENT" and details.startswith("episode_returns"), details
    with RelayClient(shard["address"], token="not-the-secret") as stranger:
        code, _, _ = insert(stranger, stranger.batch(batch.transitions, seq=0))
        assert code == "UNAUTHENTICATED"
    assert len(shard["table"]) == 0


def test_sequence_writers_are_scoped_to_their_caller(shard):
    batches, _ = collected()
    with (
        RelayClient(shard["address"], token=ACTOR, writer_id="robot") as owner,
        RelayClient(shard["address"], token=ACTOR, writer_id="robot") as impostor,
    ):
        frames = batches[0].frames
        assert insert(owner, owner.batch(batches[0].transitions, seq=0))[2].frames_counted == frames
        # Another client with the same writer id and seq is a writer of its own, not a retry.
        code, _, reply = insert(impostor, impostor.batch(batches[0].transitions, seq=0))
        assert code == "OK" and not reply.receipts[0].duplicate and reply.frames_counted == frames


ADDRESS = re.compile(r"gRPC server at (127\.0\.0\.1:\d+)")


@pytest.mark.e2e
def test_an_external_actor_feeds_an_r2d2_run_with_sequences(tmp_path):
    token = tmp_path / "actor-token"
    token.write_text("actor-secret\n")
    args = [
        "--config", "deploy/configs/statelesscartpole_r2d2_external.yaml",
        "--set", "grpc.port=0", "--set", "grpc.actor_token=actor-secret",
        "--set", "grpc.token=operator-secret", "--set", "controller.total_frames=1500",
        "--set", "controller.init_random_frames=300", "--set", "controller.utd_ratio=0.02",
        "--set", "replay.num_shards=1", "--set", "checkpoint.interval_frames=0",
    ]  # fmt: skip
    with CliRun(*args, run_dir=tmp_path / "run") as run:
        address = run.wait_log(ADDRESS.pattern, timeout=180).group(1)
        with RelayClient(address, token="operator-secret") as operator:
            operator.wait_health("SERVING", timeout=240)  # replay is up
        actor = subprocess.run(
            [PYTHON, "-m", "services.external_actor", "--address", address,
             "--token-file", str(token), "--frames", "1500", "--envs", "4",
             "--batch-frames", "128"],
            cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert actor.returncode == 0, actor.stderr[-3000:]
        fed = json.loads(actor.stdout.splitlines()[-1])
        summary = run.summary(timeout=300)
    assert fed["frames"] >= 1500 and fed["stopped_by"] == "frames", fed
    assert fed["weight_fetches"] >= 1 and fed["episodes"] > 0, fed
    # Every step counted once (sequences overlap), every frame the actor's.
    assert summary["frames"] == summary["transitions"] == fed["frames"], summary
    assert summary["optim_steps"] > 0 and summary["algorithm"] == "r2d2", summary
