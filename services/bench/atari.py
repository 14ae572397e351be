"""Pixels at scale: ``python -m services.bench atari`` (Pong; last line: one JSON object).

Measured side by side in one run on one Ray instance, with the DQN preprocessing of
``collector.atari`` (frame skip 4, 84x84 grayscale, stacks of 4) and the Nature CNN
(``collector.networks.cnn``) as the policy:

* ``ratio_collect``: agent steps per second of one Collector actor writing frame streams to a
  frame-deduplicated replay shard (``replay.frame_stack: 4``), over those of a raw loop (the
  same vector env stepped with the same epsilon-greedy CNN, nothing stored, no Ray call in the
  loop), which runs as a Ray actor so that the OS schedules it like a collector. Raw and
  collector windows alternate ``R C R ... C R``; each collector window is set against the mean
  of the raw windows around it and the ratio is the median over rounds (``collector.bench``
  does the same for CartPole). Both count transitions: env steps other than auto-reset steps.
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
(``services.bench.compiled``; ``--compile-mode``, ``--compile-backend``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import statistics
import time
from pathlib import Path

import numpy as np
import ray
import torch

from collector.bench import BenchWeights
from collector.env import env_seeds, make_vector_env
from collector.group import CollectorGroup, remote_collector
from collector.networks.cnn import PixelQSpec
from collector.rollout import RolloutWorker
from learner.bench import publish_to_use
from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.group import LearnerGroup
from replay.local_ray import init_local_ray
from replay.shard import remote_shard
from replay.table import ReplayTable

logger = logging.getLogger("services.bench.atari")
ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "collector.atari:make_atari"
ENV_KWARGS = {"game": "ALE/Pong-v5"}
SPEC = PixelQSpec(4, 84, 84, 6)
FRAME_STACK = 4
BATCH = 32


class RawLoop:
    """The limit: the vector env stepped with the CNN policy, nothing stored, no Ray call."""

    def __init__(self, num_envs: int, epsilon: float, seed: int) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        self.num_envs = num_envs
        self.epsilon = epsilon
        self.envs = make_vector_env(ENV_ID, num_envs, env_kwargs=ENV_KWARGS)
        self.policy = SPEC.make_policy(SPEC.build().eval(), np.random.SeedSequence(seed))
        self.obs, _ = self.envs.reset(seed=env_seeds(seed, 0, num_envs))

    def run(self, seconds: float) -> float:
        """Steps for ``seconds``; returns transitions per second."""
        act, step, obs = self.policy.act, self.envs.step, self.obs
        steps = episodes = 0
        with torch.inference_mode():
            start = time.perf_counter()
            while (now := time.perf_counter()) - start < seconds:
                for _ in range(16):
                    actions, _ = act(obs, self.epsilon)
                    obs, _, terminated, truncated, _ = step(actions)
                    episodes += np.count_nonzero(terminated | truncated)
                steps += 16
        self.obs = obs
        return (steps * self.num_envs - episodes) / (now - start)


class CollectorRig:
    """One Pong collector writing frame streams to one frame-deduplicated shard."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.shard = remote_shard(
            "atari-bench", 0, args.shard_capacity, num_cpus=0, frame_stack=FRAME_STACK
        )
        self.group = CollectorGroup(
            "atari-bench",
            1,
            ENV_ID,
            args.envs,
            SPEC,
            [self.shard],
            seed=0,
            num_cpus=0,
            max_restarts=0,
            env_kwargs=ENV_KWARGS,
            n_step=3,
            frame_stack=FRAME_STACK,
        )
        self.group.wait_ready()
        torch.manual_seed(0)
        self.weights = BenchWeights(0, 1, ray.put(SPEC.build().state_dict()))

    def measure(self, seconds: float, warmup_s: float) -> float:
        """Transitions/s over ``seconds`` of receipts, after ``warmup_s`` of collection."""
        args, group = self.args, self.group
        inflight = {}

        def issue() -> None:
            inflight[group.rollout(0, args.rollout_frames, args.epsilon, self.weights)] = 0

        for _ in range(2):
            issue()
        start = now = time.perf_counter()
        t_first, frames = None, 0
        while t_first is None or now - t_first < seconds:
            [ref], _ = ray.wait(list(inflight), num_returns=1)
            receipt = ray.get(ref)
            inflight.pop(ref)
            now = time.perf_counter()
            issue()
            if t_first is not None:
                frames += receipt.frames
            elif now - start >= warmup_s:
                t_first = now
        elapsed = now - t_first
        ray.get(list(inflight))
        return frames / elapsed

    def close(self) -> None:
        """Stops the collector (the shard stays for the learner phase)."""
        self.group.shutdown()


def measure_collection(args) -> tuple[dict, ray.actor.ActorHandle]:
    """Alternating raw and collector windows; returns figures and the filled shard."""
    raw = ray.remote(num_cpus=0)(RawLoop).remote(args.envs, args.epsilon, 1)
    ray.get(raw.run.remote(1.0))
    rig = CollectorRig(args)
    raw_fps, collector_fps = [ray.get(raw.run.remote(args.seconds))], []
    try:
        for index in range(args.rounds):
            collector_fps.append(rig.measure(args.seconds, args.warmup_s))
            raw_fps.append(ray.get(raw.run.remote(args.seconds)))
            logger.info(
                "collect round %d: raw %.0f, collector %.0f, raw %.0f steps/s",
                index,
                raw_fps[-2],
                collector_fps[-1],
                raw_fps[-1],
            )
    finally:
        rig.close()
        ray.kill(raw)
    brackets = [(a + b) / 2 for a, b in itertools.pairwise(raw_fps)]
    ratios = [c / r for c, r in zip(collector_fps, brackets, strict=True)]
    stats = ray.get(rig.shard.stats.remote())
    figures = {
        "ratio_collect": round(statistics.median(ratios), 3),
        "ratio_collect_rounds": [round(r, 3) for r in ratios],
        "raw_loop_steps_per_s": round(statistics.median(raw_fps), 1),
        "collector_steps_per_s": round(statistics.median(collector_fps), 1),
        "bytes_per_transition": round(stats["bytes"] / max(stats["size"], 1), 1),
        "stored_transitions": stats["size"],
    }
    return figures, rig.shard


def frame_stream_writes(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """About ``count`` Pong transitions of uniform random play, as frame-stream writes."""
    envs = make_vector_env(ENV_ID, 4, env_kwargs=ENV_KWARGS)
    rng = np.random.default_rng(seed)

    class Uniform:
        def act(self, obs, explore):
            return rng.integers(0, 6, size=len(obs)), {}

    worker = RolloutWorker(envs, Uniform(), env_seeds(seed, 9, 4), n_step=3, frame_stack=4)
    writes, total = [], 0
    while total < count:
        batch = worker.rollout(128, None, policy_version=0).transitions
        writes.append(batch)
        total += len(batch["reward"])
    envs.close()
    return writes


class LocalLoop:
    """The in-process limit: one LearnerCore sampling an in-process frame table."""

    def __init__(self, config: LearnerConfig, writes: list[dict]) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.core = LearnerCore(SPEC, config)
        self.table = ReplayTable(sum(len(w["reward"]) for w in writes), frame_stack=4, seed=0)
        for seq, batch in enumerate(writes):
            self.table.write(batch, "bench", seq)

    def run(self, seconds: float) -> tuple[int, float]:
        """Steps for about ``seconds``; returns (steps, elapsed)."""
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            self.core.train([self.core.to_batch(self.table.sample(BATCH))])
            steps += 1
        return steps, time.perf_counter() - start


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
    group = LearnerGroup("atari-bench-ws1", config, SPEC, shards, seed=0)
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
            ENV_ID,
            1,
            SPEC,
            shards,
            0,
            num_cpus=0,
            max_restarts=0,
            env_kwargs=ENV_KWARGS,
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
            v.numel() * v.element_size() for v in SPEC.build().state_dict().values()
        ),
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints progress and the JSON result as the last line."""
    parser = argparse.ArgumentParser(prog="python -m services.bench atari")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of one window")
    parser.add_argument("--warmup-s", type=float, default=2.0, help="collector warm-up seconds")
    parser.add_argument("--rounds", type=int, default=5, help="collector windows")
    parser.add_argument("--windows", type=int, default=4, help="local/remote learner windows")
    parser.add_argument("--envs", type=int, default=4, help="envs of the loop / collector")
    parser.add_argument("--rollout-frames", type=int, default=512, help="transitions/rollout")
    parser.add_argument("--epsilon", type=float, default=0.05, help="exploration rate")
    parser.add_argument("--shard-capacity", type=int, default=50_000, help="per shard")
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
        from services.bench.compiled import measure_compile

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
