"""``python -m services.bench grpc``: external insert throughput over gRPC.

For CartPole-sized and Atari-sized (84x84x4 uint8 observations) transitions, a client in
another process streams batches to ``Experience/Insert`` of a real :class:`GrpcServer`
(checks against the transition spec, coalesced writes into two real ``ReplayShard`` actors,
counting by a real :class:`services.controller.Controller` through its inbox) and, in the same
run, streams the very same serialized bytes to a raw gRPC method that only counts them: the
physical limit of the transport on this machine. Both clients send pre-serialized messages, so
the difference is the server's work. Each path streams ``REPEATS`` times; the fastest counts.

The last line of standard output is a JSON object: ``insert_small_per_s``,
``insert_atari_per_s``, ``insert_atari_mb_per_s``, ``raw_stream_mb_per_s`` (Atari bytes),
their ratio, and the small-item figures. Anchor: Reverb 0.14 on this machine took 10,000-18,000
small items/s and 4,000-8,000 Atari-sized items/s over gRPC.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import numpy as np
import ray

from services.config import load_config
from services.controller import Controller
from services.external import encode_arrays, transition_spec
from services.grpc_config import GrpcConfig

logger = logging.getLogger("relayrl.bench.grpc")

RAW_METHOD = "/relayrl.bench.Raw/Sink"
INSERT_METHOD = "/relayrl.v1.Experience/Insert"
SHARDS = 2  # as in the default run config
SCENARIOS = {
    # name: (observation shape, observation dtype, items per batch, batches, shard capacity)
    "small": ((4,), "float32", 4096, 300, 1 << 20),
    "atari": ((84, 84, 4), "uint8", 32, 320, 2048),
}
REPEATS = 3  # timed streams per path; the fastest counts (the machine is shared and noisy)


def arrays(shape: tuple[int, ...], dtype: str, n: int) -> dict[str, np.ndarray]:
    """A batch of ``n`` transitions of the run's spec with random observations."""
    rng = np.random.default_rng(0)
    if dtype == "uint8":
        obs = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    else:
        obs = rng.normal(size=(n, *shape)).astype(dtype)
    return {
        "observation": obs,
        "action": rng.integers(0, 2, size=n),
        "reward": np.ones(n, np.float32),
        "next_observation": obs.copy(),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "n_step_discount": np.full(n, 0.97, np.float32),
        "policy_version": np.zeros(n, np.int64),
    }


# -- the client (another process) ----------------------------------------------------------------
def run_client(address: str, method: str, scenario: str, warmup: int) -> dict:
    """Streams the scenario's batches ``REPEATS`` times after ``warmup`` untimed ones.

    Returns:
        The fastest stream's rates, every stream's seconds, and (Insert) the frames counted.
    """
    import grpc

    from services.proto.relayrl.v1 import relayrl_pb2 as pb

    shape, dtype, items, batches, _ = SCENARIOS[scenario]
    body = pb.InsertRequest(
        tensors=[
            pb.Tensor(key=k, dtype=d, shape=s, data=b)
            for k, d, s, b in encode_arrays(arrays(shape, dtype, items))
        ]
    ).SerializeToString()

    def messages(first: int, count: int):
        # Protobuf merges concatenated messages: a small header with the sequence number
        # followed by the shared tensors is one InsertRequest.
        for seq in range(first, first + count):
            yield pb.InsertRequest(writer_id="bench", seq=seq).SerializeToString() + body

    channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)])
    call = channel.stream_unary(method, request_serializer=None, response_deserializer=None)
    call(messages(0, warmup), timeout=600)
    seconds, counted = [], 0
    for repeat in range(REPEATS):
        started = time.perf_counter()
        reply = call(messages(warmup + repeat * batches, batches), timeout=600)
        seconds.append(time.perf_counter() - started)
        if method == INSERT_METHOD:
            counted += pb.InsertReply.FromString(reply).frames_counted
    channel.close()
    size = len(body) + 16
    best = min(seconds)
    return {
        "items_per_s": items * batches / best,
        "mb_per_s": size * batches / best / 1e6,
        "batch_bytes": size,
        "items": items * batches * REPEATS,
        "counted": counted if method == INSERT_METHOD else None,
        "seconds": [round(t, 3) for t in seconds],
    }


# -- the server side (this process) --------------------------------------------------------------
def raw_server(options: list) -> tuple[object, int]:
    """A gRPC server whose one method consumes a client stream and counts its bytes."""
    import grpc

    def sink(request_iterator, context):
        return str(sum(len(message) for message in request_iterator)).encode()

    handler = grpc.method_handlers_generic_handler(
        "relayrl.bench.Raw", {"Sink": grpc.stream_unary_rpc_method_handler(sink)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=8), options=options)
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


class Served:
    """A real GrpcServer fed into one real shard, counted by a real (actor-less) controller."""

    def __init__(self, scenario: str) -> None:
        from replay.shard import remote_shard
        from services.grpc_server import GrpcServer

        shape, dtype, _, _, capacity = SCENARIOS[scenario]
        config = load_config(
            overrides=[
                "collector.num_collectors=0",
                "grpc.port=0",
                "grpc.max_message_mb=16",
                "controller.total_frames=1000000000000",
                "controller.init_random_frames=1000000000000",
            ]
        )
        self.controller = Controller(config)
        self.controller.shards = [
            remote_shard(f"bench-{scenario}", i, capacity // SHARDS, num_cpus=0)
            for i in range(SHARDS)
        ]
        ray.get([shard.info.remote() for shard in self.controller.shards])
        space = gym.spaces.Box(0, 255, shape, dtype=np.dtype(dtype))
        self.server = GrpcServer(
            GrpcConfig(port=0, max_message_mb=16),
            self.controller.inbox,
            spec=transition_spec(space, gym.spaces.Discrete(2)),
        )
        self.server.attach(self.controller)
        self.controller.emit("setup")
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._drive, daemon=True)
        self.thread.start()

    def _drive(self) -> None:
        """The driver loop's part in external inserts: poll and idle-wait."""
        while not self.done.is_set():
            self.controller.inbox.poll(self.controller)
            self.controller.inbox.wait(self.controller, 0.05)

    def close(self) -> int:
        """Stops everything; returns the frames the controller counted."""
        self.done.set()
        self.thread.join(timeout=10)
        self.server.stop()
        for shard in self.controller.shards:
            ray.kill(shard, no_restart=True)
        return self.controller.counters.collected_frames


def client_process(address: str, method: str, scenario: str, warmup: int = 5) -> dict:
    """Runs :func:`run_client` in a fresh Python process and returns its JSON."""
    result = subprocess.run(
        [sys.executable, "-m", "services.bench.grpc", "--client", address, method, scenario,
         str(warmup)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"bench client failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark (or, with ``--client``, one client); prints the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m services.bench grpc")
    parser.add_argument("--client", nargs=4, metavar=("ADDRESS", "METHOD", "SCENARIO", "WARMUP"))
    args = parser.parse_args(argv)
    if args.client:
        address, method, scenario, warmup = args.client
        print(json.dumps(run_client(address, method, scenario, int(warmup))), flush=True)
        return 0
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        namespace="relayrl",
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
    )
    options = [("grpc.max_receive_message_length", 64 << 20)]
    raw, raw_port = raw_server(options)
    results: dict[str, float] = {}
    try:
        for scenario in SCENARIOS:
            served = Served(scenario)
            try:
                insert = client_process(served.server.address, INSERT_METHOD, scenario)
            finally:
                counted = served.close()
            stream = client_process(f"127.0.0.1:{raw_port}", RAW_METHOD, scenario)
            if insert["counted"] != insert["items"]:
                raise RuntimeError(f"{scenario}: {insert['counted']} of {insert['items']} counted")
            print(f"{scenario}: insert {insert}, raw {stream}, counted {counted}", file=sys.stderr)
            results[f"insert_{scenario}_per_s"] = round(insert["items_per_s"], 1)
            results[f"insert_{scenario}_mb_per_s"] = round(insert["mb_per_s"], 1)
            results[f"raw_stream_{scenario}_mb_per_s"] = round(stream["mb_per_s"], 1)
            results[f"{scenario}_batch_items"] = SCENARIOS[scenario][2]
            results[f"{scenario}_batch_bytes"] = insert["batch_bytes"]
    finally:
        raw.stop(0)
        ray.shutdown()
    results["raw_stream_mb_per_s"] = results["raw_stream_atari_mb_per_s"]
    ratio = results["insert_atari_mb_per_s"] / results["raw_stream_mb_per_s"]
    results["atari_vs_raw"] = round(ratio, 3)
    results["small_vs_reverb_max"] = round(results["insert_small_per_s"] / 18_000, 2)
    print(json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
