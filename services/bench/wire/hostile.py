"""``python -m services.bench hostile``: a real run with TLS and scoped credentials, attacked.

A ``python -m services.train`` run (no collectors; TLS; the operator secret from ``env:``, the
actor secret from ``file:``) is fed by an honest external writer while clients holding the
actor credential send what a hostile or broken actor could, and another client polls
``GetStatus`` throughout:

1. quiet: the poller alone (the baseline of ``GetStatus`` latency and the driver's memory);
2. hostile messages, one after the other: a message of ``--packed-mb`` MiB that is one packed
   field (``Tensor.shape``), an oversized ``writer_id``, a ``seq`` far ahead, a NaN episode
   return (each must come back INVALID_ARGUMENT or RESOURCE_EXHAUSTED, in bounded time, with
   nothing stored); then :mod:`services.bench.wire.attacks`: a poisoned writer id and a
   restarted writer, one credential hogging leases and streams, one long stream
   (``status_p99_poison_ms``, ``status_p99_hog_ms``, ``status_p99_long_stream_ms``);
3. at once: the honest writer's batches (retried, same ``seq``, while the server refuses with
   RESOURCE_EXHAUSTED), ``--idle-streams`` Insert streams that send nothing, and
   ``--checkpoint-calls`` Checkpoint calls with 10 ms deadlines (operator credential);
4. the honest writer crosses ``init_random_frames``, after which the learners owe far more
   steps than ``max_lag_steps`` (``utd_ratio`` 1000): the intake gate is shut, and one stream
   sends ``--flood-batches`` batches of 1 MiB into it until its deadline;
5. half-open calls with no credential (:func:`half_open`): headers, never a body, held for
   ``--half-open-s`` seconds (``status_p99_half_open_ms``, ``half_open_codes``).

The last line of stdout is JSON: ``status_p99_ms`` (target < 200), ``largest_refusal_ms``
(< 1000), ``driver_rss_growth_mb`` (< 8 x ``grpc.max_message_mb``), ``checkpoints_cut`` for the
Checkpoint calls (<= 3), ``frames_lost`` by the honest writer (0), and the details behind them.
Needs the ``dev`` extra (``cryptography`` makes the certificates).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
import numpy as np

from services.bench.wire import attacks
from services.bench.wire.attacks import code_of, length_field, transitions
from services.bench.wire.certs import make_pki
from services.bench.wire.halfopen import half_open
from services.grpc import control_pb2 as control_pb
from services.grpc.client import RelayClient

ADDRESS = re.compile(r"gRPC server at (\S+:\d+)")
HONEST_BATCH = 256
TARGETS = {
    "status_p99_ms": 200,
    "largest_refusal_ms": 1000,
    "checkpoints_cut": 3,
    "frames_lost": 0,
}


def log(message: str) -> None:
    """Progress to stderr."""
    print(f"[hostile] {message}", file=sys.stderr, flush=True)


class Poller(threading.Thread):
    """Polls ``GetStatus`` and samples the driver's memory until stopped."""

    def __init__(self, client: RelayClient, pid: int) -> None:
        super().__init__(name="status-poller", daemon=True)
        self.client, self.pid = client, pid
        self.latencies: dict[str, list[float]] = {}
        self.errors = 0
        self.rss: list[int] = []
        self.phase = "quiet"
        self.done = threading.Event()

    def run(self) -> None:
        """Polls every 20 ms until ``done``."""
        from services.bench.runtime.soak import rss_kib  # imports Ray: not for tests/grpc_probe.py

        while not self.done.wait(0.02):
            started = time.perf_counter()
            try:
                self.client.status()
            except grpc.RpcError:
                self.errors += 1
                continue
            ms = (time.perf_counter() - started) * 1000
            self.latencies.setdefault(self.phase, []).append(ms)
            kib = rss_kib(self.pid)
            if kib is not None:
                self.rss.append(kib)

    def p99(self, *phases: str) -> float:
        """The 99th percentile of the latencies of ``phases`` in ms."""
        values = [v for phase in phases for v in self.latencies.get(phase, [])]
        return round(float(np.percentile(values, 99)), 1) if values else float("nan")


def start_run(work: Path, pki: dict, args) -> tuple[subprocess.Popen, str, tuple[str, str]]:
    """The attacked run; returns the process, its gRPC address and its two secrets."""
    extra = attacks.frames_stored(args)  # the attacks' frames, before the gate may shut
    actor_secret = work / "actor.secret"
    actor_secret.write_text("actor-" + os.urandom(8).hex() + "\n")
    env = {**os.environ, "RELAYRL_BENCH_OPERATOR": "operator-" + os.urandom(8).hex()}
    overrides = [
        "collector.num_collectors=0",
        "grpc.port=0",
        "grpc.token=env:RELAYRL_BENCH_OPERATOR",
        f"grpc.actor_token=file:{actor_secret}",
        f"grpc.tls.cert_file={pki['server_cert']}",
        f"grpc.tls.key_file={pki['server_key']}",
        f"grpc.max_message_mb={args.max_message_mb}",
        f"grpc.stream_idle_s={args.idle_s}",
        "controller.total_frames=1000000000",
        f"grpc.calls_per_peer={args.calls_per_peer}",
        f"controller.init_random_frames={args.honest_batches * HONEST_BATCH + extra}",
        "controller.utd_ratio=1000",
        "controller.max_lag_steps=64",
        "learner.global_batch_size=32",
        "checkpoint.interval_frames=0",
        "checkpoint.interval_s=0",
        "checkpoint.keep=1000",
        "metrics.enabled=false",
        "ray.dashboard=false",
        f"run.dir={work / 'run'}",
    ]
    command = [sys.executable, "-m", "services.train"]
    for override in overrides:
        command += ["--set", override]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        for line in process.stderr:
            lines.append(line)
            if ADDRESS.search(line):
                found.set()
        found.set()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(300) or process.poll() is not None:
        raise RuntimeError("the run did not start: " + "".join(lines[-20:]))
    address = next(m.group(1) for line in lines if (m := ADDRESS.search(line)))
    return process, address, (env["RELAYRL_BENCH_OPERATOR"], actor_secret.read_text().strip())


def refusals(address: str, ca: str, actor: str, args) -> dict[str, list]:
    """Phase 2: each hostile message alone; ``[status, milliseconds]`` per message."""
    out: dict[str, list] = {}
    with (
        RelayClient(address, token=actor, ca_file=ca, writer_id="owner") as owner,
    ):
        raw = owner.channel.stream_unary("/relayrl.v1.Experience/Insert", request_serializer=bytes)
        owner.insert([transitions(8, 1)])
        good = transitions(8, 2)
        packed = length_field(3, length_field(3, b"\x01" * (args.packed_mb << 20)))
        long_id = length_field(1, b"w" * (1 << 20))  # both built before the clock starts
        messages = {
            "packed_field": lambda: raw(iter([packed]), metadata=owner.metadata),
            "oversized_writer_id": lambda: raw(iter([long_id]), metadata=owner.metadata),
            "seq_jump": lambda: owner.insert([owner.batch(good, seq=10**15)]),
            "nan_return": lambda: owner.insert(
                [owner.batch(good, episode_returns=[float("nan")], episode_lengths=[8])]
            ),
            "actor_stops_the_run": lambda: owner.stop(wait=False),
        }
        for name, call in messages.items():
            started = time.perf_counter()
            code = code_of(call)
            out[name] = [code, round((time.perf_counter() - started) * 1000, 1)]
            log(f"{name}: {code} in {out[name][1]} ms")
    return out


def honest_writer(
    address: str, ca: str, actor: str, batches: int, result: dict, *, first_seq: int = 0
) -> None:
    """Inserts ``batches`` batches, retrying each (same ``seq``) while refused for capacity.

    Each call is a new client (a new lease), so each uses a writer id of its own.
    """
    acked = retries = 0
    writer = f"honest-{first_seq}"
    with RelayClient(address, token=actor, ca_file=ca, writer_id=writer) as client:
        for seq in range(first_seq, first_seq + batches):
            request = client.batch(transitions(HONEST_BATCH, seq), seq=seq)
            while True:
                try:
                    reply = client.insert([request])
                    break
                except grpc.RpcError as err:
                    if err.code() not in (
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        grpc.StatusCode.UNAVAILABLE,
                    ):
                        raise
                    retries += 1
                    time.sleep(0.1)
            acked += reply.frames_counted
        result.update(acked=acked, retries=retries)


def crowd(address: str, ca: str, actor: str, operator: str, args) -> dict:
    """Phase 3: idle streams and short Checkpoint calls beside the honest writer."""
    release = threading.Event()
    out: dict = {}
    honest: dict = {}
    writer = threading.Thread(
        target=honest_writer, args=(address, ca, actor, args.honest_batches - 1, honest)
    )
    with (
        RelayClient(address, token=actor, ca_file=ca) as idler,
        RelayClient(address, token=operator, ca_file=ca) as operator_client,
    ):

        def idle():
            release.wait(args.idle_s * 4)
            yield from ()

        streams = [
            idler.experience.Insert.future(idle(), metadata=idler.metadata, timeout=300)
            for _ in range(args.idle_streams)
        ]
        writer.start()

        def checkpoint(_):
            request = control_pb.CheckpointRequest()
            return code_of(
                lambda: operator_client.control.Checkpoint(
                    request, metadata=operator_client.metadata, timeout=0.01
                )
            )

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            codes = list(pool.map(checkpoint, range(args.checkpoint_calls)))
        out["checkpoint_calls"] = {code: codes.count(code) for code in sorted(set(codes))}
        writer.join()
        release.set()
        ended = [f.exception(timeout=300) for f in streams]
        names = [e.code().name if e is not None else "OK" for e in ended]
        out["idle_streams"] = {name: names.count(name) for name in sorted(set(names))}
    out["honest"] = honest
    return out


def flood(address: str, ca: str, actor: str, args) -> dict:
    """Phase 4: one stream of 1 MiB batches into a shut gate, until its deadline."""
    sent = [0]
    items = (1 << 20) // 58  # CartPole transitions in about 1 MiB
    with RelayClient(address, token=actor, ca_file=ca, writer_id="flood") as client:
        batch = transitions(items, 7)

        def batches():
            for seq in range(args.flood_batches):
                sent[0] += 1
                yield client.batch(batch, seq=seq)

        code = code_of(
            lambda: client.experience.Insert(
                batches(), metadata=client.metadata, timeout=args.flood_s
            )
        )
    return {"flood_code": code, "flood_batches_read": sent[0]}


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints the JSON line last."""
    parser = argparse.ArgumentParser(prog="python -m services.bench hostile")
    parser.add_argument("--packed-mb", type=int, default=100)
    parser.add_argument("--flood-batches", type=int, default=2000)
    parser.add_argument("--flood-s", type=float, default=20.0)
    parser.add_argument("--idle-streams", type=int, default=100)
    parser.add_argument("--idle-s", type=float, default=5.0, help="grpc.stream_idle_s")
    parser.add_argument("--checkpoint-calls", type=int, default=100)
    parser.add_argument("--honest-batches", type=int, default=32)
    parser.add_argument("--max-message-mb", type=float, default=64.0)
    parser.add_argument("--half-open", type=int, default=32, help="half-open calls per method")
    parser.add_argument("--half-open-s", type=float, default=5.0)
    parser.add_argument("--hog-writers", type=int, default=4200)
    parser.add_argument("--long-stream-mb", type=int, default=64)
    parser.add_argument("--calls-per-peer", type=int, default=64, help="all clients: loopback")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="relayrl-hostile-") as tmp:
        work = Path(tmp)
        pki = make_pki(work / "pki")
        process, address, (operator, actor) = start_run(work, pki, args)
        ca = pki["ca"]
        try:
            with RelayClient(address, token=actor, ca_file=ca) as status_client:
                status_client.wait_health("SERVING", timeout=300)
                poller = Poller(status_client, process.pid)
                poller.start()
                time.sleep(3.0)  # quiet: the baseline
                baseline_kib = max(poller.rss[-10:])
                poller.phase = "hostile"
                refused = refusals(address, ca, actor, args)
                attacked: dict = {}
                attack_frames = 0
                for phase, attack in (
                    ("poison", lambda: attacks.poison(address, ca, actor, transitions)),
                    ("hog", lambda: attacks.hog(address, ca, actor, operator, transitions, args)),
                    ("long_stream", lambda: attacks.long_stream(
                        address, ca, actor, transitions, args, poller)),
                ):  # fmt: skip
                    log(phase)
                    poller.phase = phase
                    result = attack()
                    attack_frames += result.pop("frames")
                    attacked.update(result)
                    attacked[f"status_p99_{phase}_ms"] = poller.p99(phase)
                poller.phase = "hostile"
                rotation = work / "run" / "checkpoints"
                before = len(list(rotation.glob("ckpt-*")))
                log("crowd: idle streams, checkpoint calls and an honest writer at once")
                crowded = crowd(address, ca, actor, operator, args)
                checkpoints_cut = len(list(rotation.glob("ckpt-*"))) - before
                # The last honest batch crosses init_random_frames: the gate shuts.
                last: dict = {}
                honest_writer(address, ca, actor, 1, last, first_seq=args.honest_batches - 1)
                honest_acked = crowded["honest"]["acked"] + last["acked"] + 8  # + "owner"'s
                honest_acked += attack_frames
                counted = status_client.status().external_frames  # answered once counted
                log("flood: 1 MiB batches into the shut gate")
                flooded = flood(address, ca, actor, args)
                flooded["flood_frames_stored"] = status_client.status().external_frames - counted
                log("half-open: calls with no credential that never send their body")
                poller.phase = "half_open"
                opened = half_open(address, ca, args)
                poller.done.set()
                poller.join()
            with RelayClient(address, token=operator, ca_file=ca) as operator_client:
                operator_client.stop(wait=True)
            exit_code = process.wait(timeout=300)
        finally:
            if process.poll() is None:
                process.kill()
    growth_mb = (max(poller.rss) - baseline_kib) / 1024
    result = {
        "status_p99_ms": poller.p99("hostile"),
        "status_p99_quiet_ms": poller.p99("quiet"),
        "status_p99_half_open_ms": poller.p99("half_open"),
        "largest_refusal_ms": max(ms for _, ms in refused.values()),
        "driver_rss_growth_mb": round(growth_mb, 1),
        "checkpoints_cut": checkpoints_cut,
        "frames_lost": honest_acked - counted,
        "status_calls": sum(len(v) for v in poller.latencies.values()),
        "status_errors": poller.errors,
        "refusals": refused,
        **{k: v for k, v in crowded.items() if k != "honest"},
        "honest_frames": honest_acked,
        "honest_retries": crowded["honest"]["retries"],
        **flooded,
        **opened,
        **attacked,
        "max_message_mb": args.max_message_mb,
        "run_exit_code": exit_code,
    }
    result["status_p99_ratio"] = round(result["status_p99_ms"] / result["status_p99_quiet_ms"], 2)
    limits = {**TARGETS, "driver_rss_growth_mb": 8 * args.max_message_mb}
    result["within_targets"] = all(
        result[key] <= limit if key != "frames_lost" else result[key] == 0
        for key, limit in limits.items()
    )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
