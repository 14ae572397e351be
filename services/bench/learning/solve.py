"""``python -m services.bench solve``: time to solve, from process start, per algorithm.

Each run is the CLI (``python -m services.train``) in a subprocess with the algorithm's shipped
config, one run at a time (never side by side: the figure is wall time). A run stops once the
running mean return over the last 20 episodes reaches the task's threshold (each registration's
``solve`` task in ``learner.algorithms``: e.g. CartPole-v1 to 475, Pendulum-v1 to -200) or its
frame budget is spent. The time to solve is measured by the run itself from its process's start
(``return_milestones[...].process_s`` in its summary, so interpreter and import time count);
``startup_s`` is process start to the first counted rollout.

Last line of standard output: one JSON object keyed by algorithm, each with
``seconds_to_solve`` and ``frames_to_solve`` (medians over the seeds that solved),
``solved`` ("3/3"), ``startup_s`` (median) and the per-seed values.

Examples:
    python -m services.bench solve --algos ppo,dqn --seeds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from learner.algorithms import solve_tasks

ROOT = Path(__file__).resolve().parents[3]
TASKS = solve_tasks()  # each registration's SolveTask: a shipped config and its threshold


def run_once(algo: str, seed: int, storage: Path, timeout: float) -> dict:
    """One CLI run until solved or out of budget; returns the seed's figures."""
    config, threshold = TASKS[algo].config, TASKS[algo].threshold
    command = [
        sys.executable,
        "-m",
        "services.train",
        "--config",
        str(ROOT / "deploy" / "configs" / config),
        "--set",
        f"seed={seed}",
        "--set",
        f"controller.stop_return={threshold}",
        "--set",
        f"controller.return_milestones=[{threshold}]",
        "--set",
        "controller.episode_window=20",
        "--set",
        "controller.log_interval_s=5",
        "--set",
        "metrics.enabled=false",
        "--set",
        "checkpoint.at_end=false",
        "--set",
        f"run.storage={storage}",
    ]
    started = time.perf_counter()
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{algo} seed {seed} exited {result.returncode}: {result.stderr[-800:]}")
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    milestone = summary["return_milestones"].get(f"{threshold:g}")
    return {
        "seed": seed,
        "solved": milestone is not None,
        "seconds": milestone["process_s"] if milestone else None,
        "frames": milestone["frames"] if milestone else None,
        "startup_s": summary["startup_s"],
        "process_wall_s": round(elapsed, 2),
        "final_return": summary["episode_return_mean"],
    }


def summarize(runs: list[dict]) -> dict:
    """Medians over the seeds that solved, and the per-seed values."""
    solved = [r for r in runs if r["solved"]]
    median = (lambda key: statistics.median(r[key] for r in solved)) if solved else None
    return {
        "seconds_to_solve": round(median("seconds"), 2) if median else None,
        "frames_to_solve": int(median("frames")) if median else None,
        "solved": f"{len(solved)}/{len(runs)}",
        "startup_s": round(statistics.median(r["startup_s"] for r in runs), 2),
        "seeds": runs,
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m services.bench solve")
    default = ",".join(name for name, task in TASKS.items() if task.default)
    parser.add_argument("--algos", default=default, help="comma-separated algorithms")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per algorithm")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run at most")
    args = parser.parse_args(argv)
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = sorted(set(algos) - set(TASKS))
    if unknown:
        parser.error(f"--algos: unknown {unknown}; known: {sorted(TASKS)}")
    report = {}
    with tempfile.TemporaryDirectory(prefix="relayrl-solve-") as storage:
        for algo in algos:
            runs = []
            for seed in range(args.seeds):
                run = run_once(algo, seed, Path(storage), args.timeout)
                print(f"{algo} seed {seed}: {json.dumps(run)}", file=sys.stderr, flush=True)
                runs.append(run)
            report[algo] = summarize(runs)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
