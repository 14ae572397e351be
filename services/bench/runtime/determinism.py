"""``python -m services.bench determinism``: same seed, same bits, and what the mode costs.

For each algorithm whose registration has ``determinism`` bench settings (DQN with prioritized
replay and PPO), one config (2 collectors, 2 replay shards, 2 learner
ranks) runs three times with ``run.deterministic: true`` and twice in the default mode, and
once more deterministically stopped at half the budget and resumed from its checkpoint. The
runs are compared by their summaries' ``digest`` (learner state and replay contents). Progress
goes to stderr; the last line of stdout is one JSON object:

* ``digests_equal``: the three deterministic runs of every algorithm end with one digest;
* ``digests_equal_default``: the two default runs of some algorithm end with one digest
  (expected false: arrival order decides);
* ``resume_digest_equal``: stopped at half and resumed equals straight through (every
  algorithm);
* ``frames_per_s_ratio``: the default algorithm's (DQN's) mean frames/s deterministic over
  default (the target is 0.7 at
  ``run.policy_lag`` 2); ``algorithms`` holds every figure per algorithm.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from statistics import mean

import ray

from learner.algorithms import DEFAULT, bench_overrides
from replay.local_ray import init_local_ray
from services.config import load_config
from services.driver.controller import Controller

COMMON = [
    "collector.num_collectors=2",
    "collector.envs_per_collector=4",
    "collector.rollout_frames=256",
    "replay.num_shards=2",
    "learner.world_size=2",
    "checkpoint.interval_s=0",
    "checkpoint.at_end=false",
    "metrics.enabled=false",
    "controller.log_interval_s=5",
]
ALGORITHMS = bench_overrides("determinism")  # each registration's settings for this bench


def run(overrides: list[str], resume_from: Path | None = None) -> dict:
    """One run on the connected Ray; its summary."""
    controller = Controller(load_config(overrides=overrides), resume_from=resume_from)
    try:
        return controller.run()
    finally:
        controller.shutdown()


def measure(name: str, frames: int, policy_lag: int, root: Path) -> dict:
    """The runs of one algorithm and their figures."""
    base = [*COMMON, *ALGORITHMS[name], f"controller.total_frames={frames}"]
    det = [*base, "run.deterministic=true", f"run.policy_lag={policy_lag}"]
    summaries = {"deterministic": [], "default": []}
    for mode, overrides, count in (("deterministic", det, 3), ("default", base, 2)):
        for i in range(count):
            summary = run([*overrides, f"run.name=bench-det-{name}-{mode}-{i}"])
            print(f"{name} {mode} {i}: {summary['frames_per_s']} frames/s", file=sys.stderr)
            summaries[mode].append(summary)
    # Stopped at half (its final checkpoint) and resumed; cuts every quarter, as straight through.
    cuts = [f"checkpoint.dir={root / name}", f"checkpoint.interval_frames={frames // 4}"]
    run([*det, *cuts, "checkpoint.at_end=true", f"controller.total_frames={frames // 2}",
         f"run.name=bench-det-{name}-half"])  # fmt: skip
    resumed = run([*det, *cuts, f"run.name=bench-det-{name}-resumed"], resume_from=root / name)
    det_digests = [s["digest"] for s in summaries["deterministic"]]
    default_digests = [s["digest"] for s in summaries["default"]]
    rate = {mode: mean(s["frames_per_s"] for s in runs) for mode, runs in summaries.items()}
    return {
        "digests_equal": len(set(det_digests)) == 1 and det_digests[0] is not None,
        "digests_equal_default": len(set(default_digests)) == 1,
        "resume_digest_equal": resumed["digest"] == det_digests[0],
        "frames_per_s_deterministic": round(rate["deterministic"], 1),
        "frames_per_s_default": round(rate["default"], 1),
        "frames_per_s_ratio": round(rate["deterministic"] / rate["default"], 3),
        "optim_steps": summaries["deterministic"][0]["optim_steps"],
        "digest": det_digests[0],
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints its JSON line."""
    parser = argparse.ArgumentParser(prog="python -m services.bench determinism")
    parser.add_argument("--frames", type=int, default=16_384, help="frames per run")
    parser.add_argument("--policy-lag", type=int, default=2, help="run.policy_lag of each run")
    known = ",".join(ALGORITHMS)
    parser.add_argument("--algorithms", default=known, help=f"comma-separated: {known}")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="relayrl-determinism-bench-"))
    init_local_ray(log_to_driver=False)
    try:
        results = {
            name: measure(name, args.frames, args.policy_lag, root)
            for name in args.algorithms.split(",")
        }
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    first = results.get(DEFAULT) or next(iter(results.values()))
    print(
        json.dumps(
            {
                "digests_equal": all(r["digests_equal"] for r in results.values()),
                "digests_equal_default": any(r["digests_equal_default"] for r in results.values()),
                "resume_digest_equal": all(r["resume_digest_equal"] for r in results.values()),
                "frames_per_s_ratio": first["frames_per_s_ratio"],
                "frames": args.frames,
                "policy_lag": args.policy_lag,
                "algorithms": results,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
