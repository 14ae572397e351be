"""``python -m services.bench grpc``: external insert throughput over gRPC.

For CartPole-sized and Atari-sized (84x84x4 uint8 observations) transitions, a client in
another process streams batches to a real run's two ``ReplayShard`` actors, next to a raw
gRPC stream of the very same serialized bytes to a method that only counts them (the physical
limit of the transport on this machine). The paths, measured in the same run:

- ``insert`` (the headline): ``grpc.direct_writes``. The client fetches the route from a real
  :class:`GrpcServer` (``Experience/GetRoute``) and streams each batch to the shard that owns
  it, one shard's stream at a time as :meth:`RelayClient.insert_direct` does; each shard checks
  it against the transition spec and copies it into its table; a real
  :class:`services.driver.controller.Controller` gates and counts every batch through its inbox.
- ``insert_via_driver``: ``Experience/Insert`` of the driver's server, which checks each batch
  and forwards it to the shards (coalesced Ray calls, shared memory).
- ``store``: a bare store in this process: read each message (``replay.wire.reader``) and copy its
  tensors into preallocated rings, with no checks, no routing, no counting and no second
  process: the least any store does.

All paths get pre-serialized messages, so the differences are the servers' work. The shards
run at ``WORKER_NICENESS`` (0, the niceness of the reference servers in this process; Ray's
default for its workers is 15, which ``RELAYRL_BENCH_WORKER_NICENESS=15`` measures). After an
untimed stream per path (it fills the rings once: a long run's replay is full), the paths take
turns, ``REPEATS`` streams each, so all see the same moments of a shared, noisy machine; each
path's fastest counts. Every frame sent must be acknowledged and counted by the driver, or the
bench fails.

The last line of standard output is a JSON object: ``insert_small_per_s``,
``insert_atari_per_s``, ``insert_atari_mb_per_s``, ``raw_stream_mb_per_s`` (Atari bytes),
their ratio ``atari_vs_raw``, ``via_driver_vs_raw``, the store's ``store_bound_vs_raw``, and
the small-item figures. Targets: ``insert_small_per_s`` >= 100,000, ``atari_vs_raw`` >= 0.6
(Reverb's rates on the development machine, their anchor, and the measured figures are in
``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import numpy as np
import ray

from replay.local_ray import init_local_ray
from replay.wire.batches import shard_of, transition_spec
from replay.wire.codecs import encode_arrays
from replay.wire.reader import parse_insert
from services.config import load_config
from services.config.grpc import GrpcConfig
from services.driver.controller import Controller

logger = logging.getLogger("relayrl.bench.grpc")

RAW_METHOD = "/relayrl.bench.Raw/Sink"
STORE_METHOD = "/relayrl.bench.Raw/Store"
INSERT_METHOD = "/relayrl.v1.Experience/Insert"
SHARDS = 2  # as in the default run config
SCENARIOS = {
    # name: (observation shape, observation dtype, items per batch, batches, shard capacity)
    "small": ((4,), "float32", 4096, 300, 1 << 20),
    "atari": ((84, 84, 4), "uint8", 32, 320, 2048),
}
# Ray runs its workers at niceness 15 by default, below the driver; here the client and the
# reference servers share the 2 cores with the shards, so the shards get the same priority
# as they (RELAYRL_BENCH_WORKER_NICENESS=15 measures Ray's default).
WORKER_NICENESS = int(os.environ.get("RELAYRL_BENCH_WORKER_NICENESS", "0"))
REPEATS = 5  # timed streams per path; the fastest counts (the machine is shared and noisy)


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
def run_client(insert_address: str, raw_address: str, scenario: str) -> dict:
    """Streams the scenario's batches to both paths, alternating, ``REPEATS`` times each.

    First an untimed stream to each path fills the shards' rings once (a long run's replay is
    full: the first pass over fresh storage pays page faults a steady state does not). Then the
    paths take turns, so both see the same moments of a shared, noisy machine.

    Returns:
        Per path (``insert``, ``raw``): the fastest stream's rates and every stream's seconds;
        the batch size in bytes; the items sent to and the frames counted by Insert.
    """
    import grpc

    from replay.wire import experience_pb2 as pb
    from replay.wire import experience_pb2_grpc as pb_grpc

    shape, dtype, items, batches, capacity = SCENARIOS[scenario]
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

    options = [("grpc.max_send_message_length", 64 << 20)]
    insert_channel = grpc.insecure_channel(insert_address, options=options)
    raw_channel = grpc.insecure_channel(raw_address, options=options)
    route = pb_grpc.ExperienceStub(insert_channel).GetRoute(pb.GetRouteRequest(), timeout=60)
    shard_channels = [grpc.insecure_channel(a, options=options) for a in route.shard_addresses]
    shard_calls = [c.stream_unary(INSERT_METHOD) for c in shard_channels]

    def direct(first: int, count: int) -> int:
        # Each batch to its shard (replay.wire.batches.shard_of), one shard's stream at a time,
        # as RelayClient.insert_direct does.
        owned: list[list[int]] = [[] for _ in shard_calls]
        for seq in range(first, first + count):
            owned[shard_of("external/bench", seq, len(shard_calls))].append(seq)

        def stream(index: int) -> int:
            framed = (
                pb.InsertRequest(writer_id="bench", seq=seq).SerializeToString() + body
                for seq in owned[index]
            )
            reply = shard_calls[index](framed, timeout=600)
            return pb.InsertReply.FromString(reply).frames_counted

        return sum(map(stream, range(len(shard_calls))))

    insert = insert_channel.stream_unary(INSERT_METHOD)
    sends = {
        "direct": direct,
        "insert": lambda first, count: (
            pb.InsertReply.FromString(insert(messages(first, count), timeout=600)).frames_counted
        ),
        "raw": lambda first, count: (
            raw_channel.stream_unary(RAW_METHOD)(messages(first, count), timeout=600) and 0
        ),
        "store": lambda first, count: (
            raw_channel.stream_unary(STORE_METHOD)(messages(first, count), timeout=600) and 0
        ),
    }
    seq, counted, sent = 0, 0, 0
    seconds: dict[str, list[float]] = {path: [] for path in sends}
    warmup = max(5, -(-capacity // items))  # batches that fill the rings once
    for path, send in sends.items():
        counted += send(seq, warmup)
        sent += warmup * items if path in ("direct", "insert") else 0
        seq += warmup
    for _ in range(REPEATS):
        for path, send in sends.items():
            started = time.perf_counter()
            counted += send(seq, batches)
            seconds[path].append(time.perf_counter() - started)
            sent += batches * items if path in ("direct", "insert") else 0
            seq += batches
    for channel in (insert_channel, raw_channel, *shard_channels):
        channel.close()
    size = len(body) + 16
    result: dict = {"batch_bytes": size, "sent": sent, "counted": counted}
    for path, times in seconds.items():
        best = min(times)
        result[path] = {
            "items_per_s": items * batches / best,
            "mb_per_s": size * batches / best / 1e6,
            "seconds": [round(t, 3) for t in times],
        }
    return result


# -- the server side (this process) --------------------------------------------------------------
def raw_server(options: list, scenario: str) -> tuple[object, int]:
    """A gRPC server of the two reference paths, for one scenario.

    ``Sink`` consumes a client stream and counts its bytes: the transport alone. ``Store`` also
    parses each message as an ``InsertRequest`` and copies its tensors into preallocated rings
    of the scenario's replay capacity: the least any store does (one parse, one copy into
    memory that is not in cache), with no checks, no routing and no counting.
    """
    import grpc

    shape, dtype, _, _, capacity = SCENARIOS[scenario]
    rings = {
        k: np.ones((capacity, *v.shape[1:]), v.dtype) for k, v in arrays(shape, dtype, 1).items()
    }

    def sink(request_iterator, context):
        return str(sum(len(message) for message in request_iterator)).encode()

    def store(request_iterator, context):
        cursor = 0
        for message in request_iterator:
            request = parse_insert(message)
            n = 0
            for tensor in request.tensors:
                ring = rings[tensor.key]
                batch = np.frombuffer(tensor.data, ring.dtype).reshape(-1, *ring.shape[1:])
                n, start = len(batch), cursor % capacity
                head = min(n, capacity - start)
                ring[start : start + head] = batch[:head]
                ring[: n - head] = batch[head:]
            cursor += n
        return str(cursor).encode()

    handler = grpc.method_handlers_generic_handler(
        "relayrl.bench.Raw",
        {
            "Sink": grpc.stream_unary_rpc_method_handler(sink),
            "Store": grpc.stream_unary_rpc_method_handler(store),
        },
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
        from services.grpc.server import GrpcServer

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
            GrpcConfig(port=0, max_message_mb=16, direct_writes=True),
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
        with self.controller.inbox.barrier(self.controller):  # counts the shards' last receipts
            pass
        self.server.stop()
        for shard in self.controller.shards:
            ray.kill(shard, no_restart=True)
        return self.controller.counters.collected_frames


def client_process(insert_address: str, raw_address: str, scenario: str) -> dict:
    """Runs :func:`run_client` in a fresh Python process and returns its JSON."""
    result = subprocess.run(
        [sys.executable, "-m", "services.bench.wire.grpc", "--client", insert_address, raw_address,
         scenario],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"bench client failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark (or, with ``--client``, one client); prints the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m services.bench grpc")
    parser.add_argument("--client", nargs=3, metavar=("INSERT_ADDRESS", "RAW_ADDRESS", "SCENARIO"))
    args = parser.parse_args(argv)
    if args.client:
        print(json.dumps(run_client(*args.client)), flush=True)
        return 0
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    init_local_ray(num_cpus=4, _system_config={"worker_niceness": WORKER_NICENESS})
    options = [("grpc.max_receive_message_length", 64 << 20)]
    results: dict[str, float] = {}
    try:
        for scenario in SCENARIOS:
            served = Served(scenario)
            raw, raw_port = raw_server(options, scenario)
            try:
                run = client_process(served.server.address, f"127.0.0.1:{raw_port}", scenario)
            finally:
                counted = served.close()
                raw.stop(0)
            if not run["sent"] == run["counted"] == counted:
                raise RuntimeError(
                    f"{scenario}: sent {run['sent']}, acknowledged {run['counted']}, "
                    f"counted by the driver {counted}"
                )
            print(f"{scenario}: {run}", file=sys.stderr)
            insert, stream, store = run["direct"], run["raw"], run["store"]
            results[f"insert_{scenario}_per_s"] = round(insert["items_per_s"], 1)
            results[f"insert_{scenario}_mb_per_s"] = round(insert["mb_per_s"], 1)
            results[f"insert_via_driver_{scenario}_per_s"] = round(run["insert"]["items_per_s"], 1)
            results[f"insert_via_driver_{scenario}_mb_per_s"] = round(run["insert"]["mb_per_s"], 1)
            results[f"raw_stream_{scenario}_mb_per_s"] = round(stream["mb_per_s"], 1)
            results[f"store_bound_{scenario}_mb_per_s"] = round(store["mb_per_s"], 1)
            results[f"{scenario}_batch_items"] = SCENARIOS[scenario][2]
            results[f"{scenario}_batch_bytes"] = run["batch_bytes"]
    finally:
        ray.shutdown()
    results["raw_stream_mb_per_s"] = results["raw_stream_atari_mb_per_s"]
    ratio = results["insert_atari_mb_per_s"] / results["raw_stream_mb_per_s"]
    results["atari_vs_raw"] = round(ratio, 3)
    results["store_bound_vs_raw"] = round(
        results["store_bound_atari_mb_per_s"] / results["raw_stream_mb_per_s"], 3
    )
    results["via_driver_vs_raw"] = round(
        results["insert_via_driver_atari_mb_per_s"] / results["raw_stream_mb_per_s"], 3
    )
    results["small_vs_reverb_max"] = round(results["insert_small_per_s"] / 18_000, 2)
    results["worker_niceness"] = WORKER_NICENESS
    results["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
