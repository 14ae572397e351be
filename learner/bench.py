"""Learner benchmark: ``python -m learner.bench`` (last line: one JSON object).

DQN on a 4-64-64-2 MLP, global batch 64, side by side in one run:

* ``local``: an in-process loop (one :class:`LearnerCore`, one thread) sampling from a local
  tensor buffer: the limit.
* ``ws1`` / ``ws2``: a :class:`LearnerGroup` of 1 or 2 ranks sampling from 2 remote replay
  shards, in rounds of ``--steps-per-round`` steps with a publication per round (what the
  controller does). Local and ws1 windows alternate so that load from elsewhere on the machine
  hits both alike; ``ratio_ws1 = ws1 / local``.
* ``publish_to_use``: from the moment rank 0 finishes a round (its receipt stamped, weights in
  the object store) to a real ``Collector`` actor having loaded that version (``set_weights``
  answered), p50 and p95 over ``--publications`` rounds.

On a 2-core machine ``ws2`` runs two CPU-bound ranks on two cores shared with the shards and
the driver, and every step waits for both in the gradient all-reduce: compare it with
``local`` only as a sanity figure. ``ws1_*_ms`` split a ws1 round (rank-side sampling, training,
publication); ``load_avg_1m`` records how busy the machine was.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import numpy as np
import ray
import torch
from tensordict import TensorDict

from collector.manage.group import remote_collector
from collector.networks.q_mlp import ModelSpec
from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.ranks.group import LearnerGroup
from replay.local_ray import init_local_ray
from replay.shard import remote_shard

SPEC = ModelSpec(4, 2, (64, 64))
BATCH = 64


def transitions(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """CartPole-shaped random transitions."""
    return {
        "observation": rng.normal(size=(n, 4)).astype(np.float32),
        "action": rng.integers(0, 2, size=n),
        "reward": np.ones(n, np.float32),
        "next_observation": rng.normal(size=(n, 4)).astype(np.float32),
        "terminated": rng.random(n) < 0.05,
        "truncated": np.zeros(n, bool),
        "policy_version": np.zeros(n, np.int64),
    }


class LocalLoop:
    """The in-process limit: sample indices from a tensor buffer, one optimizer step each."""

    def __init__(self, config: LearnerConfig, buffer_size: int = 20_000) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.core = LearnerCore(SPEC, config)
        arrays = transitions(buffer_size, np.random.default_rng(0))
        self.buffer = TensorDict(
            {k: torch.as_tensor(v) for k, v in arrays.items()}, batch_size=[buffer_size]
        )
        self.buffer["reward"] = self.buffer["reward"].float()

    def run(self, seconds: float) -> tuple[int, float]:
        """Steps for about ``seconds``; returns (steps, elapsed)."""
        size = len(self.buffer)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            batch = self.buffer[torch.randint(size, (BATCH,))]
            self.core.train([batch])
            steps += 1
        return steps, time.perf_counter() - start


def run_group(
    group: LearnerGroup, seconds: float, steps_per_round: int, receipts: list | None = None
) -> tuple[int, float]:
    """Back-to-back rounds (publishing each) for about ``seconds``; returns (steps, elapsed)."""
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        receipt = group.step(steps_per_round)
        steps += receipt.optim_steps
        if receipts is not None:
            receipts.append(receipt)
    return steps, time.perf_counter() - start


def publish_to_use(group: LearnerGroup, collector, count: int) -> list[float]:
    """Milliseconds from a round's end on rank 0 to the collector holding its weights."""
    latencies = []
    for _ in range(count):
        receipt = group.step(1)
        applied = ray.get(collector.set_weights.remote(receipt.published))
        done = time.time()
        assert receipt.published is not None  # every round of step() publishes
        if not applied:
            raise RuntimeError(f"collector refused version {receipt.published.version}")
        latencies.append((done - receipt.finished_at) * 1000)
    return latencies


def main(argv: list[str] | None = None) -> dict:
    """Runs the benchmark and prints progress lines and a final JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one window")
    parser.add_argument("--windows", type=int, default=6, help="local/ws1 window pairs")
    parser.add_argument("--steps-per-round", type=int, default=64)
    parser.add_argument("--publications", type=int, default=200)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    config = LearnerConfig(global_batch_size=BATCH, hidden_sizes=SPEC.hidden_sizes)
    init_local_ray()
    shards = [remote_shard("bench", i, 50_000, seed=i) for i in range(2)]
    rng = np.random.default_rng(1)
    ray.get([s.write.remote(transitions(20_000, rng), "bench", 0) for s in shards])
    local = LocalLoop(config)
    local.run(0.5)  # warm-up
    totals: dict[str, list[float]] = {"local": [0, 0.0], "ws1": [0, 0.0], "ws2": [0, 0.0]}
    results: dict[str, float] = {}
    ws1_receipts: list = []
    try:
        group = LearnerGroup("bench-ws1", config, SPEC, shards, seed=0)
        run_group(group, 0.5, args.steps_per_round)
        for _ in range(args.windows):
            for name, (steps, elapsed) in (
                ("local", local.run(args.seconds)),
                ("ws1", run_group(group, args.seconds, args.steps_per_round, ws1_receipts)),
            ):
                totals[name][0] += steps
                totals[name][1] += elapsed
        collector = remote_collector(
            "bench", 0, "CartPole-v1", 1, SPEC, shards, 0, num_cpus=0, max_restarts=0
        )
        ray.get(collector.ping.remote())
        latencies = publish_to_use(group, collector, args.publications)
        group.shutdown()
        ray.kill(collector)

        group = LearnerGroup(
            "bench-ws2", LearnerConfig(world_size=2, global_batch_size=BATCH), SPEC, shards, 0
        )
        run_group(group, 0.5, args.steps_per_round)
        steps, elapsed = run_group(group, args.seconds * args.windows, args.steps_per_round)
        totals["ws2"] = [steps, elapsed]
        group.shutdown()
    finally:
        ray.shutdown()
    for name, (updates, seconds) in totals.items():
        results[f"{name}_updates_per_s"] = round(updates / seconds, 1)
        print(f"{name}: {updates} updates in {seconds:.2f}s", flush=True)
    results["ratio_ws1"] = round(results["ws1_updates_per_s"] / results["local_updates_per_s"], 3)
    results["ratio_ws2"] = round(results["ws2_updates_per_s"] / results["local_updates_per_s"], 3)
    results["publish_to_use_ms_p50"] = round(float(np.percentile(latencies, 50)), 2)
    results["publish_to_use_ms_p95"] = round(float(np.percentile(latencies, 95)), 2)
    rounds = totals["ws1"][1] / max(len(ws1_receipts), 1)
    results["ws1_round_ms"] = round(rounds * 1000, 2)
    for part in ("sample_s", "train_s", "publish_s"):
        mean = np.mean([getattr(r, part) for r in ws1_receipts]) * 1000
        results[f"ws1_{part[:-2]}_ms"] = round(float(mean), 2)
    results["batch_size"] = BATCH
    results["load_avg_1m"] = round(os.getloadavg()[0], 2)
    results["steps_per_round"] = args.steps_per_round
    print(json.dumps(results), flush=True)
    return results


if __name__ == "__main__":
    main()
