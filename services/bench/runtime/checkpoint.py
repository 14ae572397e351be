"""``python -m services.bench checkpoint``: checkpoint and restore times of a full-size run.

Starts the real services on an embedded local Ray (2 collectors, 2 replay shards, one learner),
fills replay with ``--transitions`` CartPole transitions (default 1 M) through the replay client,
cuts a checkpoint with the controller (drain, pause barrier, parallel dumps, manifest with
SHA-256), then resumes a second controller from it (verify, replay, collectors, driver
counters, learners). Actor start-up is timed apart from the restore proper. The last line of
standard output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import ray

from learner.bench import transitions as random_transitions
from replay.local_ray import init_local_ray
from services.checkpoints.cut import restore_learners, restore_services
from services.checkpoints.store import verify
from services.config import load_config
from services.driver.controller import Controller


def fill(controller: Controller, transitions: int, chunk: int = 50_000) -> None:
    """Writes ``transitions`` CartPole-shaped transitions, half to each shard."""
    rng = np.random.default_rng(0)
    shards = len(controller.shards)
    for seq, start in enumerate(range(0, transitions, chunk)):
        n = min(chunk, transitions - start)
        batch = random_transitions(n, rng)
        controller.replay.write(batch, "bench", seq, shard=seq % shards)
    controller.counters.collected_frames = controller.counters.transitions = transitions


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints its JSON line."""
    parser = argparse.ArgumentParser(prog="python -m services.bench checkpoint")
    parser.add_argument("--transitions", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="relayrl-ckpt-bench-"))
    overrides = [
        f"replay.capacity={args.transitions}",
        "replay.num_shards=2",
        "metrics.enabled=false",
        f"checkpoint.dir={root}",
        "controller.total_frames=1000",
    ]
    init_local_ray(log_to_driver=True)
    try:
        first = Controller(load_config(overrides=[*overrides, "run.name=ckbench-a"]))
        first.setup()
        fill(first, args.transitions)
        started = time.perf_counter()
        path = first.checkpoint()
        save_s = time.perf_counter() - started
        first.shutdown()
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        started = time.perf_counter()
        verify(path)
        verify_s = time.perf_counter() - started
        second = Controller(load_config(overrides=[*overrides, "run.name=ckbench-b"]))
        started = time.perf_counter()
        second.setup()  # actors start fresh; then the restore proper, in its order
        start_s = time.perf_counter() - started
        started = time.perf_counter()
        restore_services(second, path)
        services_s = time.perf_counter() - started
        started = time.perf_counter()
        restore_learners(second, path)
        learners_s = time.perf_counter() - started
        restored = sum(s["size"] for s in second.replay.stats())
        second.shutdown()
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    print(
        json.dumps(
            {
                "transitions": args.transitions,
                "restored_transitions": restored,
                "checkpoint_mb": round(size / 2**20, 1),
                "checkpoint_save_s": round(save_s, 3),
                "checkpoint_verify_s": round(verify_s, 3),
                "restore_services_s": round(services_s, 3),
                "restore_learners_s": round(learners_s, 3),
                "restore_s": round(verify_s + services_s + learners_s, 3),
                "actor_start_s": round(start_s, 3),
                "save_mb_s": round(size / 2**20 / save_s, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
