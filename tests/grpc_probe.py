"""A gRPC client run as a separate process by tests/test_grpc_run.py; prints one JSON line.

python tests/grpc_probe.py MODE ADDRESS TOKEN
  insert   two batches on one stream, then both again (a retry)
  weights  weights newer than (-1, -1), loaded into the run's network, which then acts
  bad      each bad input alone (malformed, hostile, unauthorized, an impostor), and the
           replay sizes and frame counts around them
"""

from __future__ import annotations

import json
import sys

import grpc
import numpy as np

from collector.networks.q_mlp import ModelSpec
from services.bench.wire.hostile import length_field, transitions
from services.grpc.client import RelayClient


def replay_size(client: RelayClient) -> int:
    return sum(shard.size for shard in client.status().replay)


def insert(client: RelayClient) -> dict:
    before = client.status()
    ended = transitions(300, 1)
    ended["terminated"][-1] = True  # the reported episode ends in the batch
    first = client.batch(ended, episode_returns=[12.0], episode_lengths=[12])
    # 2,000 CartPole items (116 KB) go through shared memory, 300 by Ray (see replay.shm).
    second = client.batch(transitions(2000, 2))
    reply = client.insert([first, second])
    retry = client.insert([first, second])  # both acknowledged again, neither stored twice
    after = client.status()
    return {
        "frames_before": before.frames,
        "frames_after": after.frames,
        "external_after": after.external_frames,
        "replay_before": sum(s.size for s in before.replay),
        "replay_after": sum(s.size for s in after.replay),
        "counted": reply.frames_counted,
        "total": reply.total_frames,
        "items": [r.items for r in reply.receipts],
        "writer_ids": [r.writer_id for r in reply.receipts],
        "retry_counted": retry.frames_counted,
        "retry_duplicate": [r.duplicate for r in retry.receipts],
    }


def weights(client: RelayClient) -> dict:
    fetched = client.get_weights(-1, -1)
    config = json.loads(client.status().config_json)
    spec = ModelSpec(4, 2, tuple(config["learner"]["hidden_sizes"]))
    network = spec.build()
    network.load_state_dict(fetched.state_dict)
    policy = spec.make_policy(network, np.random.SeedSequence(0))
    actions, _ = policy.act(np.zeros((5, 4), np.float32), {"deterministic": True})
    again = client.get_weights(*fetched.key)
    return {
        "generation": fetched.generation,
        "version": fetched.version,
        "actions": actions.tolist(),
        "keys": sorted(fetched.state_dict),
        "not_newer_again": again is None,
    }


def refused(call) -> list:
    try:
        call()
    except grpc.RpcError as err:
        return [err.code().name, err.details()]
    return ["OK", ""]


def bad(client: RelayClient, address: str, token: str) -> dict:
    before = replay_size(client)
    frames_before = client.status().frames
    cases = {}

    def send(name: str, arrays=None, request=None) -> None:
        if request is None:
            request = client.batch(arrays, seq=10_000)
        cases[name] = refused(lambda: client.insert([request]))

    good = transitions(64)
    unknown = client.batch(good, seq=10_000)
    unknown.tensors[0].dtype = "complex64"
    send("unknown_dtype", request=unknown)
    send("shape", {**good, "observation": np.zeros((64, 5), np.float32)})
    send("missing_key", {k: v for k, v in good.items() if k != "reward"})
    nan = dict(good, reward=good["reward"].copy())
    nan["reward"][3] = np.nan
    send("nan_reward", nan)
    send("too_large", transitions(5000))
    send("nan_return", request=client.batch(good, seq=10_000, episode_returns=[float("nan")],
                                            episode_lengths=[3]))  # fmt: skip
    send("zero_length", request=client.batch(good, seq=10_000, episode_returns=[1.0],
                                             episode_lengths=[0]))  # fmt: skip
    raw = client.channel.stream_unary("/relayrl.v1.Experience/Insert", request_serializer=bytes)
    hostile = {
        "packed_shape": length_field(3, length_field(3, b"\x01" * (1 << 20))),
        "huge_writer_id": length_field(1, b"w" * (1 << 20)),
        "oversized": length_field(1, b"w" * (4 << 20)),
    }
    for name, message in hostile.items():
        cases[name] = refused(lambda m=message: raw(iter([m]), metadata=client.metadata))
    for name, credential in (("no_token", None), ("wrong_token", "not-the-token")):
        other = RelayClient(address, token=credential)
        cases[name] = refused(lambda other=other: other.insert([other.batch(good)]))
        cases[name + "_status"] = refused(other.status)
        cases[name + "_health"] = [other.health(), ""]
        other.close()
    between, frames_between = replay_size(client), client.status().frames
    # The server keeps serving: a good batch after the bad ones is stored (its seq 0 is fresh:
    # nothing of the refused batches, numbered 10,000, was stored).
    kept = client.insert([client.batch(good)])
    after_good = replay_size(client)
    # Another client with the same credential and writer id writes a writer of its own (its
    # lease scopes it): its seqs ahead of this client's poison nothing, and this one may not
    # jump its seq far ahead (later batches would pass for retries).
    impostor = RelayClient(address, token=token, writer_id=client.writer_id)
    cases["impostor"] = refused(lambda: impostor.insert([impostor.batch(good, seq=900)]))
    impostor.close()
    cases["seq_jump"] = refused(lambda: client.insert([client.batch(good, seq=10**15)]))
    retry = client.insert([client.batch(good, seq=0)])
    after_poison = client.insert([client.batch(good, seq=1)])
    return {
        "cases": cases,
        "replay_before": before,
        "replay_between": between,
        "frames_before": frames_before,
        "frames_between": frames_between,
        "replay_after_good": after_good,
        "after_poison": [r.duplicate for r in after_poison.receipts],
        "good_counted": kept.frames_counted,
        "retry_duplicate": [r.duplicate for r in retry.receipts],
        "replay_end": replay_size(client),
        "frames_end": client.status().frames,
    }


def main() -> None:
    mode, address, token = sys.argv[1:4]
    client = RelayClient(address, token=token, writer_id=f"probe-{mode}")
    result = {"insert": insert, "weights": weights}.get(mode)
    out = result(client) if result is not None else bad(client, address, token)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
