"""Pixels at scale: ``python -m services.bench atari`` (Pong; last line: one JSON object).

Measured side by side in one run on one Ray instance, with the DQN preprocessing of
``collector.atari`` (frame skip 4, 84x84 grayscale, stacks of 4) and the Nature CNN
(``collector.networks.cnn``) as the policy (the task: ``services.bench.pixels.pong``):

* ``ratio_collect``: agent steps per second of one Collector actor writing frame streams to a
  frame-deduplicated replay shard (``replay.frame_stack: 4``), over those of a raw loop (the
  same vector env stepped with the same epsilon-greedy CNN, nothing stored, no Ray call in the
  loop), which runs as a Ray actor so that the OS schedules it like a collector. Raw and
  collector windows alternate ``R C R ... C R``; each collector window is set against the mean
  of the raw windows around it and the ratio is the median over rounds (the raw loop and the
  rig of ``collector.rig``, which ``collector.bench`` runs on CartPole). Both count
  transitions: env steps other than auto-reset steps.
* ``bytes_per_transition``: the shard's bytes (the filled frame ring plus the transition
  columns) over the transitions it holds, after the collection windows.
* ``ratio_learn``: DQN optimizer steps per second with batch 32 of a one-rank LearnerGroup
  sampling from two remote frame-deduplicated shards (prefetching, a publication per round),
  over an in-process loop (one LearnerCore sampling the same data from an in-process table with
  the same storage); windows alternate.
* ``publish_to_use_ms_p50`` (and p95): from rank 0's end of a round to a Pong collector having
  loaded the CNN's weights of that round (``learner.bench.publish_to_use``).

``stacked_bytes_per_transition`` is what the same transition takes stored as stacked
``observation`` and ``next_observation`` (two ``[4, 84, 84]`` uint8 stacks plus the columns).
The machine's load (``load_avg_1m``) is recorded: on a shared 2-core machine every figure is
noisy, the ratios less so than the rates.

``--compile`` measures only the learner with ``learner.compile`` against eager instead
(``services.bench.pixels.compiled``; ``--compile-mode``, ``--compile-backend``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time

import numpy as np
import ray

from collector.manage.group import remote_collector
from collector.rig import (
    CollectorRig,
    RawLoops,
    add_rig_arguments,
    alternate,
    bracket_ratios,
    rig_options,
)
from learner.bench import publish_to_use
from learner.config import LearnerConfig
from learner.ranks.group import LearnerGroup
from replay.local_ray import init_local_ray
from replay.shard import remote_shard
from services.bench.pixels.compiled import measure_compile
from services.bench.pixels.pong import BATCH, FRAME_STACK, PONG, LocalLoop, frame_stream_writes

logger = logging.getLogger("services.bench.pixels.atari")


def measure_collection(args) -> tuple[dict, ray.actor.ActorHandle]:
    """Alternating raw and collector windows; returns figures and the filled shard."""
    raw = RawLoops(PONG, 1, args.envs, args.epsilon, chunk=16, first_seed=1, warmup_s=1.0)
    rig = CollectorRig("atari-bench", 1, PONG, **rig_options(args))
    try:
        raw_fps, collector_fps = alternate(
            raw, rig, rounds=args.rounds, seconds=args.seconds, warmup_s=args.warmup_s
        )
    finally:
        rig.close(shards=False)  # the shard stays for the learner phase
        raw.close()
    ratios = bracket_ratios(raw_fps, collector_fps)
    shard = rig.shards[0]
    stats = ray.get(shard.stats.remote())
    figures = {
        "ratio_collect": round(statistics.median(ratios), 3),
        "ratio_collect_rounds": [round(r, 3) for r in ratios],
        "raw_loop_steps_per_s": round(statistics.median(raw_fps), 1),
        "collector_steps_per_s": round(statistics.median(collector_fps), 1),
        "bytes_per_transition": round(stats["bytes"] / max(stats["size"], 1), 1),
        "stored_transitions": stats["size"],
    }
    return figures, shard


def run_group(group: LearnerGroup, seconds: float, steps_per_round: int) -> tuple[int, float]:
    """Back-to-back rounds (publishing each) for about ``seconds``; returns (steps, elapsed)."""
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += group.step(steps_per_round).optim_steps
    return steps, time.perf_counter() - start


def measure_learning(args, collected_shard) -> dict:
    """Remote-shard learner rounds against the in-process loop, then publish-to-use."""
    writes = frame_stream_writes(args.learn_transitions, seed=3)
    fresh = remote_shard("atari-bench", 1, args.shard_capacity, num_cpus=0, frame_stack=FRAME_STACK)
    shards = [collected_shard, fresh]
    ray.get([shards[1].write.remote(w, "bench", seq) for seq, w in enumerate(writes)])
    config = LearnerConfig(global_batch_size=BATCH, lr=6.25e-5, target_update_interval=100)
    local = LocalLoop(config, writes)
    local.run(1.0)  # warm-up
    group = LearnerGroup("atari-bench-ws1", config, PONG.spec, shards, seed=0)
    totals = {"local": [0, 0.0], "remote": [0, 0.0]}
    try:
        run_group(group, 1.0, args.steps_per_round)
        for _ in range(args.windows):
            for name, (steps, elapsed) in (
                ("local", local.run(args.seconds)),
                ("remote", run_group(group, args.seconds, args.steps_per_round)),
            ):
                totals[name][0] += steps
                totals[name][1] += elapsed
            logger.info("learn window: %s", totals)
        collector = remote_collector(
            "atari-bench",
            1,
            PONG.env_id,
            1,
            PONG.spec,
            shards,
            0,
            num_cpus=0,
            max_restarts=0,
            env_kwargs=PONG.env_kwargs,
            frame_stack=FRAME_STACK,
        )
        ray.get(collector.ping.remote())
        latencies = publish_to_use(group, collector, args.publications)
        ray.kill(collector)
    finally:
        group.shutdown()
    local_rate = totals["local"][0] / totals["local"][1]
    remote_rate = totals["remote"][0] / totals["remote"][1]
    return {
        "ratio_learn": round(remote_rate / local_rate, 3),
        "local_updates_per_s": round(local_rate, 1),
        "remote_updates_per_s": round(remote_rate, 1),
        "publish_to_use_ms_p50": round(float(np.percentile(latencies, 50)), 2),
        "publish_to_use_ms_p95": round(float(np.percentile(latencies, 95)), 2),
        "cnn_weights_bytes": sum(
            v.numel() * v.element_size() for v in PONG.spec.build().state_dict().values()
        ),
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints progress and the JSON result as the last line."""
    parser = argparse.ArgumentParser(prog="python -m services.bench atari")
    add_rig_arguments(
        parser,
        seconds=8.0,
        warmup_s=2.0,
        rounds=5,
        envs=4,
        rollout_frames=512,
        shard_capacity=50_000,
    )
    parser.add_argument("--windows", type=int, default=4, help="local/remote learner windows")
    parser.add_argument("--learn-transitions", type=int, default=4096)
    parser.add_argument("--steps-per-round", type=int, default=16)
    parser.add_argument("--publications", type=int, default=50)
    parser.add_argument(
        "--compile", action="store_true", help="only the learner: compiled vs eager updates/s"
    )
    parser.add_argument("--compile-mode", default="default", help="learner.compile of --compile")
    parser.add_argument("--compile-backend", default="inductor", help="learner.compile_backend")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.compile:
        print(json.dumps(measure_compile(args)), flush=True)
        return 0
    init_local_ray()
    try:
        result, shard = measure_collection(args)
        result.update(measure_learning(args, shard))
    finally:
        ray.shutdown()
    columns = 8 + 4 + 1 + 1 + 4 + 8  # action, reward, ends, discount, policy version
    stacked = 2 * FRAME_STACK * 84 * 84 + columns
    result.update(
        stacked_bytes_per_transition=stacked,
        targets={"ratio_collect": 0.85, "bytes_per_transition": 8000, "ratio_learn": 0.8},
        envs=args.envs,
        rollout_frames=args.rollout_frames,
        batch_size=BATCH,
        seconds=args.seconds,
        load_avg_1m=round(os.getloadavg()[0], 2),
    )
    print(json.dumps(result), flush=True)
    return 0
