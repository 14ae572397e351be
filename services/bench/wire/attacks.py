"""Attacks of ``python -m services.bench hostile`` on writer leases and stream memory.

Each runs while the poller polls ``GetStatus`` (its ``status_p99_<phase>_ms`` is reported
beside the others), before the honest writer shuts the intake gate, and stores at most
:func:`frames_stored` frames (the run's ``init_random_frames`` counts them in):

- **poison**: another client with the actor credential writes the victim's writer id first, at
  ``seq`` 3-7 and 900; the victim's ``seq`` 0-7 must then all be stored, none ``duplicate``
  (``poison_victim_stored`` 8), and a restarted victim (same writer id and credential, a new
  client) must be served at once (``restart_reclaim_ms``);
- **hog**: one actor-credential client writes ``--hog-writers`` writer ids in one stream (more
  than the 4,096 leases a server keeps) and opens Insert streams until it is refused; a writer
  with another credential must still be served meanwhile (``hog_honest_code`` OK), and a new
  writer with the hog's credential once its streams are gone (``hog_peer_code`` OK: the lease
  book makes room);
- **long stream**: a stream of 8 batches of 1 MiB, then one of ``--long-stream-mb`` MiB; the
  driver's memory must not grow with the second (``long_stream_rss_growth_mb``, its RSS after
  the long stream over its RSS after the short one).
"""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np

from services.grpc.client import RelayClient

BATCH_ITEMS = (1 << 20) // 58  # CartPole transitions in about 1 MiB


def transitions(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A CartPole batch of ``n`` transitions (what the run's spec takes)."""
    rng = np.random.default_rng(seed)
    observation = rng.normal(size=(n, 4)).astype(np.float32)
    return {
        "observation": observation,
        "action": rng.integers(0, 2, size=n),
        "reward": np.ones(n, np.float32),
        "next_observation": observation + 0.01,
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "n_step_discount": np.full(n, 0.99**3, np.float32),
        "policy_version": np.zeros(n, np.int64),
    }


def length_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, written by hand."""
    out, value = bytearray([number << 3 | 2]), len(payload)
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes([value]) + payload


def code_of(call) -> str:
    """The status name a call ends with."""
    try:
        call()
    except grpc.RpcError as err:
        return err.code().name
    return "OK"


def frames_stored(args) -> int:
    """Frames these attacks store at most (what the run's gate must let in before it shuts)."""
    poison = 6 * 8 + 8 * 8 + 8  # the poisoner's, the victim's, the restarted victim's
    hog = args.hog_writers + 8 + 8
    return poison + hog + (8 + args.long_stream_mb) * BATCH_ITEMS


def poison(address: str, ca: str, actor: str, transitions) -> dict:
    """The victim's writer id used first by another client; then the victim, then restarted."""
    with (
        RelayClient(address, token=actor, ca_file=ca, writer_id="victim") as poisoner,
        RelayClient(address, token=actor, ca_file=ca, writer_id="victim") as victim,
    ):
        ahead = [poisoner.batch(transitions(8, s), seq=s) for s in (3, 4, 5, 6, 7, 900)]
        frames = poisoner.insert(ahead).frames_counted
        reply = victim.insert([victim.batch(transitions(8, s), seq=s) for s in range(8)])
    stored = sum(not r.duplicate for r in reply.receipts)
    started = time.perf_counter()
    with RelayClient(address, token=actor, ca_file=ca, writer_id="victim") as restarted:
        again = restarted.insert([restarted.batch(transitions(8), seq=0)])
    return {
        "frames": frames + reply.frames_counted + again.frames_counted,
        "poison_victim_stored": stored,
        "poison_victim_duplicates": len(reply.receipts) - stored,
        "restart_stored": again.frames_counted,
        "restart_reclaim_ms": round((time.perf_counter() - started) * 1000, 1),
    }


def hog(address: str, ca: str, actor: str, operator: str, transitions, args) -> dict:
    """One actor credential takes every lease and stream it can; others must still write."""
    release = threading.Event()
    out: dict = {}
    with (
        RelayClient(address, token=actor, ca_file=ca, writer_id="hog") as hogger,
        RelayClient(address, token=operator, ca_file=ca, writer_id="honest-op") as honest,
        RelayClient(address, token=actor, ca_file=ca, writer_id="hog-peer") as peer,
    ):
        one = transitions(1)

        def writers():
            for n in range(args.hog_writers):
                request = hogger.batch(one, seq=0)
                request.writer_id = f"hog-{n}"
                yield request

        started = time.perf_counter()
        reply = hogger.experience.Insert(writers(), metadata=hogger.metadata, timeout=300)
        out["hog_writers_stored"] = out["frames"] = reply.frames_counted
        out["hog_writers_s"] = round(time.perf_counter() - started, 2)

        def idle():
            release.wait(60)
            yield from ()

        streams: list = []
        refused = threading.Event()
        while len(streams) < 64 and not refused.is_set():
            future = hogger.experience.Insert.future(idle(), metadata=hogger.metadata, timeout=90)
            future.add_done_callback(lambda _: refused.set())
            streams.append(future)
            refused.wait(0.05)  # a refused stream is answered at once
        try:
            out["hog_streams_held"] = len(streams) - 1 if refused.is_set() else len(streams)
            _write(out, "hog_honest", honest, transitions)  # another credential, streams held
        finally:
            release.set()
            for future in streams:
                future.exception(timeout=90)
        _write(out, "hog_peer", peer, transitions)  # the hog's credential, after its leases
    return out


def _write(out: dict, name: str, client: RelayClient, transitions) -> None:
    """One batch of 8 by ``client``: its status and milliseconds in ``out``."""
    started = time.perf_counter()
    try:
        out["frames"] += client.insert([client.batch(transitions(8), seq=0)]).frames_counted
        out[f"{name}_code"] = "OK"
    except grpc.RpcError as err:
        out[f"{name}_code"] = err.code().name
    out[f"{name}_ms"] = round((time.perf_counter() - started) * 1000, 1)


def long_stream(address: str, ca: str, actor: str, transitions, args, poller) -> dict:
    """A short stream, then ``--long-stream-mb`` MiB in one; the driver's RSS after each.

    The short one (8 batches) sets the working set (the driver keeps freed buffers for reuse,
    ``replay.wire.heap``); the long one must not add to it.
    """
    batch = transitions(BATCH_ITEMS, 3)
    frames, peaks, seconds = 0, [], 0.0
    for name, count in (("short", 8), ("long", args.long_stream_mb)):
        with RelayClient(address, token=actor, ca_file=ca, writer_id=f"{name}-stream") as client:

            def batches(c=client, n=count):
                for seq in range(n):
                    yield c.batch(batch, seq=seq)

            started = time.perf_counter()
            frames += client.experience.Insert(
                batches(), metadata=client.metadata, timeout=600
            ).frames_counted
            seconds = time.perf_counter() - started
        seen = len(poller.rss)
        while len(poller.rss) < seen + 5:  # samples after the stream (one per poll)
            time.sleep(0.02)
        peaks.append(max(poller.rss[-5:]))
    return {
        "frames": frames,
        "long_stream_mb": args.long_stream_mb,
        "long_stream_s": round(seconds, 2),
        "long_stream_rss_growth_mb": round((peaks[1] - peaks[0]) / 1024, 1),
    }
