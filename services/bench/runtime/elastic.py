"""``python -m services.bench elastic``: one DQN run resized live, stopped and resumed elsewhere.

One CartPole DQN run (``deploy/configs/cartpole_dqn.yaml``) serves ``Control/Scale`` on
loopback gRPC. It starts with 1 collector, 1 replay shard and 1 learner rank; grows to 3
collectors, then to 2 shards and 2 ranks; shrinks back to 1/1/1 in one request; and is stopped
with a final checkpoint. A second run resumes that checkpoint at 2 collectors, 3 shards and 1
rank and trains on for ``--resume-frames``. Each size is held ``--hold-s`` seconds and its
collection rate measured from ``GetStatus`` frames over that window. Progress goes to stderr;
the last line of stdout is one JSON object:

* ``frames_exact``: at every checkpoint cut (one at 3/2/2, the stop's, the resumed run's final)
  the transitions stored in replay equal the transitions counted, and the resumed run starts
  from the checkpoint's counters;
* ``items_preserved``: the resumed run's 3 shards hold exactly the checkpoint's items (every
  column and priority mass, compared row by row);
* ``resize_seconds``: each resize's own duration from the ``resize`` events (``metrics.jsonl``),
  keyed ``"<what> <from>-><to>"``; ``scale_reply_seconds``: each ``Control/Scale`` call, request
  to answer; ``targets_met``: collectors < 5 s and learner ranks < 15 s;
* ``frames_per_s``: keyed by size ``"<collectors>/<shards>/<ranks>"`` (the shrunk 1/1/1 as
  ``"1/1/1 after"``);
* ``return_at_first_resize``, ``return_per_phase`` and ``final_return``: the running mean
  episode return (learning goes on across every resize).

Examples:
    python -m services.bench elastic
    python -m services.bench elastic --hold-s 10 --resume-frames 10000
    python -m services.bench elastic --set controller.utd_ratio=0.125
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import ray

from learner.algorithms import featured_config
from replay.local_ray import init_local_ray
from replay.persist.checkpoint import load_table
from replay.persist.items import item_rows, take_items
from services.checkpoints.store import read_json
from services.config import load_config
from services.grpc.client import RelayClient
from services.observe.runlog import read_events
from services.run.launch import prepare_run

CONFIG = (
    Path(__file__).resolve().parents[3] / "deploy" / "configs" / featured_config("bench_elastic")
)
TOKEN = "elastic-bench-token"
TARGETS_S = {"collectors": 5.0, "world_size": 15.0}  # the targets on this machine


def stored_rows(directory: Path, num_shards: int) -> list[bytes]:
    """The rows of the tables ``directory/replay-<i>`` (a checkpoint or a dump)."""
    return item_rows(take_items(load_table(directory / f"replay-{i}")) for i in range(num_shards))


def size_key(collectors: int, shards: int, world_size: int) -> str:
    """``"3/2/2"``.

    Examples:
        >>> size_key(3, 2, 2)
        '3/2/2'
    """
    return f"{collectors}/{shards}/{world_size}"


def resize_seconds(events: list[dict]) -> dict[str, float]:
    """Each resize event's seconds, keyed ``"<what> <from>-><to>"`` (a repeat gets ``#2``).

    Examples:
        >>> resize_seconds([{"what": "collectors", "from": 1, "to": 3, "seconds": 2.5}])
        {'collectors 1->3': 2.5}
    """
    out: dict[str, float] = {}
    for event in events:
        key = f"{event['what']} {event['from']}->{event['to']}"
        while key in out:
            key += "#2"
        out[key] = event["seconds"]
    return out


def targets_met(events: list[dict]) -> bool:
    """Whether every collector resize took < 5 s and every learner resize < 15 s.

    Examples:
        >>> targets_met([{"what": "collectors", "seconds": 4.0}, {"what": "shards", "seconds": 9}])
        True
        >>> targets_met([{"what": "world_size", "seconds": 16.0}])
        False
    """
    return all(e["seconds"] < TARGETS_S[e["what"]] for e in events if e["what"] in TARGETS_S)


def rate(start: tuple[float, int], end: tuple[float, int]) -> float:
    """Frames/s between two ``(seconds, frames)`` readings.

    Examples:
        >>> rate((10.0, 1000), (20.0, 6000))
        500.0
    """
    return round((end[1] - start[1]) / max(end[0] - start[0], 1e-9), 1)


def free_port() -> int:
    """A port the OS reports free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def overrides(
    root: Path, name: str, sizes: tuple[int, int, int], capacity: int, extra: list[str]
) -> list[str]:
    """The run's settings on top of the shipped CartPole DQN config (``extra``: ``--set``)."""
    collectors, shards, world = sizes
    return [
        f"run.name={name}",
        f"run.dir={root / name}",
        f"collector.num_collectors={collectors}",
        f"replay.num_shards={shards}",
        f"learner.world_size={world}",
        f"replay.capacity={capacity}",  # nothing overwritten: stored == counted stays exact
        "checkpoint.interval_frames=0",
        "checkpoint.interval_s=0",
        "metrics.enabled=false",
        "controller.log_interval_s=1",
        *extra,
    ]


class Cuts:
    """A ``checkpoint`` hook: at each cut, (items stored, transitions counted, shards)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, int]] = []

    def __call__(self, c, path, seconds) -> None:
        """Records the cut (the controller calls it at the cut's loop boundary)."""
        stored = sum(s["size"] for s in c.replay.stats())
        self.seen.append((stored, c.counters.transitions, len(c.shards)))
        print(f"cut {path}: stored {stored}, counted {c.counters.transitions}", file=sys.stderr)

    def exact(self) -> bool:
        """Whether at every cut the items stored equal the transitions counted (and some were)."""
        return bool(self.seen) and all(s == t > 0 for s, t, _ in self.seen)


def live_run(root: Path, args) -> dict:
    """The first run: 1/1/1, grown to 3/1/1 and 3/2/2, shrunk to 1/1/1, stopped."""
    port = free_port()
    sets = [*overrides(root, "elastic-live", (1, 1, 1), args.capacity, args.set)]
    sets += ["controller.total_frames=1000000000", f"grpc.port={port}", f"grpc.token={TOKEN}"]
    run = prepare_run(load_config(CONFIG, overrides=sets))
    cuts, latest = Cuts(), {}
    run.controller.register("checkpoint", cuts)
    run.controller.register("progress", lambda _, snapshot: latest.update(snapshot))
    summary: list[dict] = []
    thread = threading.Thread(target=lambda: summary.append(run.execute()), daemon=True)
    thread.start()
    rates, returns, replies = {}, {}, {}
    with RelayClient(f"127.0.0.1:{port}", token=TOKEN, timeout=600) as client:
        client.wait_health("SERVING", timeout=600)

        def hold(key: str) -> None:
            start = (time.monotonic(), client.status().frames)
            time.sleep(args.hold_s)
            rates[key] = rate(start, (time.monotonic(), client.status().frames))
            returns[key] = latest.get("episode_return_mean")
            print(f"{key}: {rates[key]} frames/s, return {returns[key]}", file=sys.stderr)

        def scale(label: str, **sizes) -> None:
            reply = client.scale(**sizes, wait=True)
            replies[label] = round(reply.seconds, 3)
            print(f"scale {label}: {reply.seconds:.2f} s", file=sys.stderr)

        deadline = time.monotonic() + 600  # collection under way before the first window
        while client.status().frames < args.warmup_frames:
            assert time.monotonic() < deadline, "the run collects no frames"
            time.sleep(0.5)
        hold(size_key(1, 1, 1))
        first_return = latest.get("episode_return_mean")
        scale("collectors 1->3", num_collectors=3)
        hold(size_key(3, 1, 1))
        scale("shards 1->2, world_size 1->2", num_shards=2, world_size=2)
        hold(size_key(3, 2, 2))
        client.checkpoint()  # a cut at the large size: frames exact across 2 shards
        scale("all 3/2/2->1/1/1", num_collectors=1, num_shards=1, world_size=1)
        hold(size_key(1, 1, 1) + " after")
        path = Path(client.stop(wait=True))
    thread.join(timeout=600)
    events = read_events(run.run_dir, "resize")
    return {
        "checkpoint": path,
        "cuts": cuts,
        "events": events,
        "rates": rates,
        "returns": returns,
        "replies": replies,
        "first_return": first_return,
        "summary": summary[0],
    }


def resumed_run(root: Path, path: Path, saved: dict, args) -> dict:
    """The second run: the checkpoint resumed at 2/3/1, trained on for ``--resume-frames``."""
    total = saved["collected_frames"] + args.resume_frames
    sets = [*overrides(root, "elastic-resumed", (2, 3, 1), args.capacity, args.set)]
    sets += [f"controller.total_frames={total}", "checkpoint.at_end=true"]
    run = prepare_run(load_config(CONFIG, overrides=sets), resume=path)
    cuts, marks, checks = Cuts(), {}, {}

    def at_setup(c) -> None:
        counted = c.counters
        checks["counters"] = (
            counted.collected_frames == saved["collected_frames"]
            and counted.transitions == saved["transitions"]
            and counted.optim_steps == saved["optim_steps"]
        )
        redump = root / "redump"
        redump.mkdir()
        c.replay.dump(redump)
        checks["items"] = stored_rows(redump, len(c.shards)) == stored_rows(path, 1)
        checks["count"] = sum(s["size"] for s in c.replay.stats())
        marks["start"] = (time.monotonic(), counted.collected_frames)

    run.controller.register("setup", at_setup)
    run.controller.register(
        "train_end", lambda c: marks.update(end=(time.monotonic(), c.counters.collected_frames))
    )
    run.controller.register("checkpoint", cuts)
    summary = run.execute()
    return {
        "cuts": cuts,
        "checks": checks,
        "rate": rate(marks["start"], marks["end"]),
        "summary": summary,
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints its JSON line."""
    parser = argparse.ArgumentParser(
        prog="python -m services.bench elastic",
        description=__doc__.split("\n\n")[0],
        epilog="examples:\n  python -m services.bench elastic --hold-s 10\n"
        "  python -m services.bench elastic --set controller.utd_ratio=0.125",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--hold-s", type=float, default=20.0, help="seconds at each live size")
    parser.add_argument("--warmup-frames", type=int, default=2000, help="before the first window")
    parser.add_argument("--resume-frames", type=int, default=20_000, help="after the resume")
    parser.add_argument("--capacity", type=int, default=1_500_000, help="replay.capacity")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override"
    )
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="relayrl-elastic-bench-"))
    init_local_ray(log_to_driver=False)
    try:
        live = live_run(root, args)
        path = live["checkpoint"]
        saved = read_json(path / "driver.json")["counters"]
        checkpoint_items = sum(read_json(t)["size"] for t in path.glob("replay-*/table.json"))
        resumed = resumed_run(root, path, saved, args)
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    checks = resumed["checks"]
    rates = {**live["rates"], size_key(2, 3, 1) + " resumed": resumed["rate"]}
    final = resumed["summary"]
    result = {
        "frames_exact": live["cuts"].exact() and resumed["cuts"].exact() and checks["counters"],
        "items_preserved": checks["items"] and checks["count"] == checkpoint_items,
        "resize_seconds": resize_seconds(live["events"]),
        "scale_reply_seconds": live["replies"],
        "targets_met": targets_met(live["events"]),
        "frames_per_s": rates,
        "return_at_first_resize": live["first_return"],
        "return_per_phase": live["returns"],
        "final_return": final["episode_return_mean"],
        "checkpoint_items": checkpoint_items,
        "cuts": [list(c) for c in live["cuts"].seen + resumed["cuts"].seen],
        "frames_live": live["summary"]["frames"],
        "frames_final": final["frames"],
        "generations": [live["summary"]["generation"], final["generation"]],
        "hold_s": args.hold_s,
        "overrides": args.set,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
