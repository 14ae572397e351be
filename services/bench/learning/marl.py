"""``python -m services.bench marl``: IQL, VDN and QMIX on Spread against random play.

Each method trains with its shipped config (``deploy/configs/spread_{iql,vdn,qmix}.yaml``:
MPE's ``simple_spread_v3``, 3 agents, 25-step episodes, team return = the sum of the agents'
rewards) on the same frame budget, one run at a time on one local Ray started here. A uniform
random policy is measured in the same process on the same env (100 episodes per seed).

Per method: ``return_mean``, the mean team return over the last 100 episodes (median over the
seeds), ``frames_per_s`` and ``updates_per_s`` (medians; training wall time, start-up excluded),
and the per-seed values. The last line of standard output is one JSON object keyed ``random``,
``iql``, ``vdn``, ``qmix``; a line on standard error says whether VDN and QMIX each beat random
by at least a third of the gap between random and the best method and match IQL.

Examples:
    python -m services.bench marl --frames 60000 --seeds 3
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import ray

from collector.envs.multiagent import ParallelVectorEnv
from learner.algorithms import ALGORITHMS
from replay.local_ray import init_local_ray

ROOT = Path(__file__).resolve().parents[3]
# The multi-agent registrations; the independent learners (no mixer) are the baseline to match.
METHODS = tuple(name for name, algo in ALGORITHMS.items() if algo.multi_agent)
INDEPENDENT = tuple(m for m in METHODS if ALGORITHMS[m].fixed.get("learner.marl.mixer") == "none")
WINDOW = 100


def random_play(
    env_id: str, env_kwargs: Mapping[str, Any], *, episodes: int = WINDOW, seed: int = 0
) -> dict:
    """Uniform random joint actions on ``num_envs=4`` copies of the env.

    Returns:
        ``return_mean`` over the first ``episodes`` finished episodes and ``frames_per_s``
        (vector steps x envs per second).
    """
    envs = ParallelVectorEnv.from_factory(env_id, 4, env_kwargs=env_kwargs)
    rng = np.random.default_rng(seed)
    envs.reset(seed=[seed * 4 + i for i in range(4)])
    returns: list[float] = []
    running = np.zeros(envs.num_envs)
    steps = 0
    started = time.perf_counter()
    while len(returns) < episodes:
        actions = rng.integers(0, envs.layout.num_actions, size=(envs.num_envs, envs.n_agents))
        _, reward, terminated, truncated, _ = envs.step(actions)
        steps += envs.num_envs
        running += reward  # the auto-reset step after an episode's end has reward 0
        for i in np.flatnonzero(terminated | truncated):
            returns.append(float(running[i]))
            running[i] = 0.0
    wall = time.perf_counter() - started
    envs.close()
    return {"return_mean": float(np.mean(returns[:episodes])), "frames_per_s": steps / wall}


def train_once(method: str, seed: int, frames: int, storage: Path) -> dict:
    """One run of the method's config; returns its summary figures."""
    from services.config import load_config
    from services.driver.controller import Controller

    config = load_config(
        ROOT / "deploy" / "configs" / f"spread_{method}.yaml",
        [
            f"seed={seed}",
            f"controller.total_frames={frames}",
            f"controller.episode_window={WINDOW}",
            "controller.log_interval_s=10",
            "metrics.enabled=false",
            "checkpoint.at_end=false",
            f"run.storage={storage}",
        ],
    )
    controller = Controller(config)
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    return {
        "seed": seed,
        "return_mean": summary["episode_return_mean"],
        "frames": summary["frames"],
        "optim_steps": summary["optim_steps"],
        "frames_per_s": summary["frames_per_s"],
        "updates_per_s": summary["updates_per_s"],
        "wall_s": summary["wall_s"],
    }


def _median(runs: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 3)


def verdict(report: Mapping[str, Mapping[str, float]]) -> str:
    """Whether each mixer (VDN, QMIX) clears random by a third of the gap to the best.

    And whether it matches the independent learners (IQL).
    """
    random_return = report["random"]["return_mean"]
    best = max(report[m]["return_mean"] for m in METHODS)
    bar = random_return + (best - random_return) / 3
    independent = max(report[m]["return_mean"] for m in INDEPENDENT)
    parts = []
    for method in (m for m in METHODS if m not in INDEPENDENT):
        value = report[method]["return_mean"]
        ok = value >= bar and value >= independent
        parts.append(f"{method} {value:.2f} ({'meets' if ok else 'misses'} target)")
    return f"random {random_return:.2f}, best {best:.2f}, bar {bar:.2f}: " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m services.bench marl")
    parser.add_argument("--frames", type=int, default=60_000, help="frames per run")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per method")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset")
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not set(methods) <= set(METHODS) or args.frames < 1 or args.seeds < 1:
        parser.error(f"--methods: a subset of {METHODS}; --frames and --seeds must be >= 1")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from services.config import load_config

    env = load_config(ROOT / "deploy" / "configs" / ALGORITHMS[METHODS[-1]].configs[0]).collector
    randoms = [
        random_play(env.env_id, env.env_kwargs, seed=seed) | {"seed": seed}
        for seed in range(args.seeds)
    ]
    report: dict[str, dict] = {
        "random": {
            "return_mean": _median(randoms, "return_mean"),
            "frames_per_s": _median(randoms, "frames_per_s"),
            "seeds": randoms,
        }
    }
    print(f"random: {json.dumps(report['random'])}", file=sys.stderr, flush=True)
    init_local_ray(num_cpus=4)
    try:
        with tempfile.TemporaryDirectory(prefix="relayrl-marl-") as storage:
            for method in methods:
                runs = []
                for seed in range(args.seeds):
                    run = train_once(method, seed, args.frames, Path(storage))
                    print(f"{method} seed {seed}: {json.dumps(run)}", file=sys.stderr, flush=True)
                    runs.append(run)
                report[method] = {
                    "return_mean": _median(runs, "return_mean"),
                    "frames": args.frames,
                    "frames_per_s": _median(runs, "frames_per_s"),
                    "updates_per_s": _median(runs, "updates_per_s"),
                    "seeds": runs,
                }
    finally:
        ray.shutdown()
    if set(methods) == set(METHODS):
        print(verdict(report), file=sys.stderr, flush=True)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
