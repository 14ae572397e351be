"""``python -m services.bench recurrent``: what a recurrent policy costs collection, per frame.

The same env and collectors (a shipped recurrent on-policy config, by default the one a
registration features as ``bench_recurrent``: recurrent PPO on the velocity-masked CartPole)
are collected two ways, alternating in one
process so both see the same machine load:

* ``recurrent``: the config as shipped (``learner.recurrent``): the policy steps its LSTM or
  GRU once per vector step with one state per env, and the rollouts are stored as sequences
  with their states (``collector.sequences``);
* ``mlp``: the same config with ``learner.recurrent=none``: the feed-forward policy, rollouts
  stored as steps.

Each measurement is a collector's own work without Ray: the config's vector env stepped by the
run's policy (:class:`~collector.onpolicy.OnPolicyWorker`, GAE targets, ``rollout_frames`` per
rollout) and every rollout written to a FIFO replay table (:class:`~replay.table.ReplayTable`).
The last line is JSON with ``recurrent_over_mlp_frame_cost``: the median over rounds of
(seconds per frame of ``recurrent``) / (seconds per frame of ``mlp``); the target is <= 1.5.
Beside it, ``cpu_ratios`` and their median ``recurrent_over_mlp_cpu_cost``: the same ratio of
the process's CPU seconds per frame (``time.process_time``), which time the other processes of
a loaded machine take from this one does not inflate (the wall ratio is what the target is on;
the CPU ratio tells a slow machine from a slow path).

What a recurrent step costs beyond the feed-forward one is the policy's: acting runs the
network's one-step path (``forward_step``: the flat encoder, the trunk, ``torch.lstm_cell`` or
``torch.gru_cell`` over the core's weights and the heads, no sequence machinery; see
``docs/networks.md``), and the worker zeroes the states of the envs whose episode starts in
place.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from collector.envs.vector import env_seeds, make_vector_env
from collector.onpolicy import OnPolicyWorker
from learner.algorithms import featured_config
from replay.table import ReplayTable
from services.config import load_config
from services.config.recipes import algorithm_for
from services.config.spec import model_spec_for

CONFIG = f"deploy/configs/{featured_config('bench_recurrent')}"
KINDS = ("recurrent", "mlp")


class Collection:
    """One path: the config's vector env, its policy, an on-policy worker and a FIFO table.

    Args:
        config: The run config (``learner.recurrent`` decides the path).
        seed: Seeds the envs and the network.
    """

    def __init__(self, config, seed: int) -> None:
        torch.manual_seed(seed)
        cfg = config.collector
        self.envs = make_vector_env(
            cfg.env_id, cfg.envs_per_collector, env_kwargs=cfg.env_kwargs, autoreset="same_step"
        )
        spec = model_spec_for(config)
        self.network = type(spec).__name__
        policy = spec.make_policy(spec.build().eval(), np.random.SeedSequence(seed))
        transform = algorithm_for(config).collector_transform(config)
        seeds = env_seeds(seed, 0, cfg.envs_per_collector)
        self.worker = OnPolicyWorker(self.envs, policy, seeds, transform)
        self.steps = max(1, cfg.rollout_frames // cfg.envs_per_collector)
        self.table = ReplayTable(100_000, sampler="fifo", seed=seed)
        self.seq = 0

    def run(self, seconds: float) -> tuple[float, float]:
        """Collects for about ``seconds``; returns wall and CPU seconds per frame stored."""
        frames, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            batch = self.worker.rollout(self.steps, {}, policy_version=0)
            self.table.write(batch.transitions, "bench", self.seq)
            self.table.clear()  # as the lockstep loop does after each iteration
            self.seq += 1
            frames += batch.frames
        frames = max(frames, 1)
        return (time.perf_counter() - start) / frames, (time.process_time() - cpu) / frames


def measure(*, config_path: str, rounds: int, seconds: float, overrides: list[str]) -> dict:
    """Alternates the two paths ``rounds`` times; returns the figures (see the module doc)."""
    torch.set_num_threads(1)
    base = load_config(config_path, ["metrics.enabled=false", *overrides])
    if base.learner.recurrent == "none":
        raise SystemExit(f"{config_path}: learner.recurrent is none; give a recurrent config")
    configs = {
        "recurrent": base,
        "mlp": load_config(
            config_path, ["metrics.enabled=false", *overrides, "learner.recurrent=none"]
        ),
    }
    paths = {kind: Collection(configs[kind], base.seed) for kind in KINDS}
    for path in paths.values():
        path.run(min(seconds, 1.0))  # warm-up: allocations, first tables
    costs: dict[str, list[float]] = {kind: [] for kind in KINDS}
    cpu_costs: dict[str, list[float]] = {kind: [] for kind in KINDS}
    ratios, cpu_ratios = [], []
    for index in range(rounds):
        order = KINDS if index % 2 == 0 else KINDS[::-1]
        for kind in order:
            wall, cpu = paths[kind].run(seconds)
            costs[kind].append(wall)
            cpu_costs[kind].append(cpu)
        ratios.append(costs["recurrent"][-1] / costs["mlp"][-1])
        cpu_ratios.append(cpu_costs["recurrent"][-1] / cpu_costs["mlp"][-1])
    for path in paths.values():
        path.envs.close()
    return {
        "bench": "recurrent",
        "config": config_path,
        "env": base.collector.env_id,
        "num_envs": base.collector.envs_per_collector,
        "recurrent": f"{base.learner.recurrent} {base.learner.recurrent_hidden_size}",
        "networks": {kind: paths[kind].network for kind in KINDS},
        "rounds": rounds,
        "recurrent_frames_per_s": round(1 / statistics.median(costs["recurrent"]), 1),
        "mlp_frames_per_s": round(1 / statistics.median(costs["mlp"]), 1),
        "ratios": [round(r, 3) for r in ratios],
        "cpu_ratios": [round(r, 3) for r in cpu_ratios],
        "recurrent_over_mlp_cpu_cost": round(statistics.median(cpu_ratios), 3),
        "recurrent_over_mlp_frame_cost": round(statistics.median(ratios), 3),
        "target": 1.5,
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints a JSON line last."""
    parser = argparse.ArgumentParser(prog="python -m services.bench recurrent", description=__doc__)
    parser.add_argument("--config", default=CONFIG, help="a recurrent on-policy run config")
    parser.add_argument("--rounds", type=int, default=6, help="alternations of the two paths")
    parser.add_argument("--seconds", type=float, default=3.0, help="per path and round")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    args = parser.parse_args(argv)
    result = measure(
        config_path=args.config, rounds=args.rounds, seconds=args.seconds, overrides=args.set
    )
    print(json.dumps(result))
    return 0
