"""``python -m services.bench tune``: PBT against a random search, same population and frames.

Both searches run through ``services.search`` (the machinery of ``python -m services.tune``:
:func:`services.tune.plan` checks the arguments, :func:`services.search.driver.run_search`
runs Ray Tune) on the same config (default the shipped LunarLander PPO), over the same space of
deliberately spread hyperparameters (``learner.lr`` log-uniform over [1e-5, 3e-3],
``learner.onpolicy.ent_coef`` uniform over [0, 0.05]), with the same population
(``--population``), frames per trial (``--frames-per-trial``) and trials at once
(``--max-concurrent``):

- ``random``: the space sampled once per trial, the ``fifo`` scheduler (no early stopping);
- ``pbt``: the ``pbt`` scheduler with the same fields as its mutations, perturbing every
  ``--perturbation-frames``.

The sampler is seeded with ``--seed`` before each search, so both start from the same initial
hyperparameters (``initial`` per trial in the report) when the whole population runs at once
(``--max-concurrent`` 0, the default). With fewer trials at once, Tune creates the next trials
only as earlier ones end: PBT then exploits within each group that runs together
(``live_population``), and its resampling draws from the same generator, so the later trials'
initial values differ from the random search's. Trials run to their budget (the
config's ``controller.stop_return`` is cleared) so the final returns compare.

Definitions (per search, in the JSON line's ``random`` and ``pbt``):

- ``best_return``: the best trial's final running mean return (``episode_return_mean`` over the
  config's episode window at the trial's last result; ``best.json``'s value).
- ``mean_final_return``: the trials' final running mean returns, averaged.
- ``frames_spent``: frames the search collected, summed over every trial's runs: each result's
  frames minus the trial's previous result (after a PBT exploit, minus the donor checkpoint's
  frames the receiver resumes from). Frames a run collects after its last result are not counted.
- ``search_frames_to_threshold``: ``frames_spent`` at the first result (in time) of any trial
  whose running mean return reached ``--threshold`` (default 200); None if none did.
- ``trial_frames_to_threshold``: that trial's own frame counter then (after PBT exploits it
  includes the frames its donors collected); ``trial_to_threshold``: its id.

Comparison: ``pbt_over_random_frames_to_threshold`` (search frames; below 1 means PBT needed
fewer), ``pbt_minus_random_best_return`` and ``target_met`` (PBT reached the threshold with
fewer search frames, or ended with the higher best return). Progress goes to stderr, one JSON
object is the last line of stdout; both tune directories are kept under ``--out``.

Examples:
    python -m services.bench tune --population 4 --frames-per-trial 1000000
        --perturbation-frames 125000
    python -m services.bench tune --config deploy/configs/cartpole_ppo.yaml --threshold 100
        --population 2 --frames-per-trial 4096 --perturbation-frames 1024
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from learner.algorithms import featured_config

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "deploy" / "configs" / featured_config("bench_tune")  # LunarLander, on-policy
SPACE = {
    "learner.lr": {"loguniform": [1.0e-5, 3.0e-3]},
    "learner.onpolicy.ent_coef": {"uniform": [0.0, 0.05]},
}
# Trials run to their budget; progress lines often enough to time the threshold.
BENCH_SETS = ("controller.stop_return=null", "controller.log_interval_s=2")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The bench's arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m services.bench tune",
        description="PBT against a random search (same population, same frames per trial).",
    )
    parser.add_argument("--config", default=str(CONFIG), help="run config (default LunarLander)")
    parser.add_argument("--space", help="YAML search space (default: lr and ent_coef, spread)")
    parser.add_argument("--population", type=int, default=4, help="trials per search")
    parser.add_argument("--frames-per-trial", type=int, default=1_000_000)
    parser.add_argument("--perturbation-frames", type=int, default=100_000, help="PBT interval")
    parser.add_argument(
        "--max-concurrent", type=int, default=0, help="trials at once (0: the population)"
    )
    parser.add_argument("--threshold", type=float, default=200.0, help="running mean return")
    parser.add_argument("--seed", type=int, default=0, help="sampler and runs' seed")
    parser.add_argument("--out", help="directory (default <storage root>/bench-tune-<time>)")
    parser.add_argument("--searches", default="random,pbt", help="which, in order")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override for every trial"
    )
    return parser.parse_args(argv)


def recorder():
    """A Tune callback keeping every result's time, trial, frames and return (driver side)."""
    from ray.tune import Callback

    class Recorder(Callback):
        def __init__(self) -> None:
            self.results: list[dict] = []
            self.initial: dict[str, dict] = {}

        def on_trial_start(self, iteration, trials, trial, **info) -> None:
            self.initial.setdefault(trial.trial_id, dict(trial.config))

        def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
            self.results.append(
                {
                    "time": time.time(),
                    "trial": trial.trial_id,
                    "frames": int(result.get("frames") or 0),
                    "return": result.get("episode_return_mean"),
                }
            )

    return Recorder()


def account(
    results: list[dict], lineage: list[dict], threshold: float, start: float | None = None
) -> dict:
    """Frames spent by a search and when it first reached ``threshold`` (see the module).

    Examples:
        >>> results = [
        ...     {"time": 1, "trial": "a", "frames": 100, "return": 10.0},
        ...     {"time": 2, "trial": "b", "frames": 100, "return": 50.0},
        ...     {"time": 4, "trial": "a", "frames": 300, "return": 60.0},
        ...     {"time": 5, "trial": "b", "frames": 200, "return": 250.0},
        ... ]
        >>> exploit = {"time": 3, "receiver": "a", "donor": "b", "frame": 100}
        >>> found = account(results, [exploit], 200.0)
        >>> found["search_frames_to_threshold"], found["trial_frames_to_threshold"]
        (500, 200)
        >>> found["frames_spent"]
        500
    """
    events = [(r["time"], 1, r) for r in results] + [(e["time"], 0, e) for e in lineage]
    events.sort(key=lambda item: (item[0], item[1]))
    baseline: dict[str, int] = {}
    spent = 0
    found: dict = {"search_frames_to_threshold": None, "trial_frames_to_threshold": None}
    found.update(trial_to_threshold=None, wall_s_to_threshold=None)
    if start is None:
        start = events[0][0] if events else 0.0
    for when, kind, event in events:
        if kind == 0:  # an exploit: the receiver resumes from the donor's checkpoint
            baseline[event["receiver"]] = int(event["frame"])
            continue
        spent += max(0, event["frames"] - baseline.get(event["trial"], 0))
        baseline[event["trial"]] = event["frames"]
        value = event["return"]
        reached = isinstance(value, int | float) and value >= threshold
        if reached and found["search_frames_to_threshold"] is None:
            found.update(
                search_frames_to_threshold=spent,
                trial_frames_to_threshold=event["frames"],
                trial_to_threshold=event["trial"],
                wall_s_to_threshold=round(when - start, 1),
            )
    return {"frames_spent": spent, **found}


def run_one(name: str, args: argparse.Namespace, space: Path, out: Path) -> dict:
    """One search (``random``: fifo; ``pbt``) through ``services.search``; its figures."""
    from services import tune as tune_cli
    from services.search.driver import run_search
    from services.search.results import read_lineage

    scheduler = "fifo" if name == "random" else "pbt"
    tune_dir = out / name
    argv = ["--config", args.config, "--space", str(space), "--scheduler", scheduler]
    argv += ["--num-samples", str(args.population), "--max-frames", str(args.frames_per_trial)]
    argv += ["--perturbation-frames", str(args.perturbation_frames)]
    concurrent = args.max_concurrent or args.population
    argv += ["--max-concurrent", str(concurrent), "--dir", str(tune_dir)]
    sets = [*BENCH_SETS, f"seed={args.seed}", *args.set]
    argv += [arg for item in sets for arg in ("--set", item)]
    targs = tune_cli.build_parser().parse_args(argv)
    search = tune_cli.plan(targs)  # raises ConfigError before anything starts
    tune_dir.mkdir(parents=True, exist_ok=True)
    (tune_dir / "search.json").write_text(json.dumps(vars(targs), indent=1) + "\n")
    random.seed(args.seed)  # the same initial samples in both searches
    np.random.seed(args.seed)
    record = recorder()
    started, wall_start = time.perf_counter(), time.time()
    with contextlib.redirect_stdout(sys.stderr):  # Tune's tables: stdout ends with our JSON
        final = run_search(targs, search, tune_dir, resume=False, callbacks=[record])
    wall = time.perf_counter() - started
    lineage = read_lineage(tune_dir)
    figures = account(record.results, lineage, args.threshold, wall_start)
    last: dict[str, dict] = {}
    for result in record.results:
        last[result["trial"]] = result
    trials = {
        trial: {
            "initial": record.initial.get(trial),
            "final_frames": row["frames"],
            "final_return": row["return"],
        }
        for trial, row in sorted(last.items())
    }
    return {
        "scheduler": scheduler,
        "best_return": final["best_return"],
        "best_trial": final["best_trial"],
        **figures,
        "mean_final_return": _mean([row["final_return"] for row in trials.values()]),
        "trials": final["trials"],
        "live_population": min(concurrent, args.population),
        "exploits": final["exploits"],
        "wall_s": round(wall, 1),
        "frames_per_s": round(figures["frames_spent"] / wall, 1) if wall else None,
        "per_trial": trials,
        "errors": final["errors"],
        "dir": final["dir"],
        "plot": final["plot"],
    }


def _mean(values: list) -> float | None:
    numbers = [v for v in values if isinstance(v, int | float)]
    return round(sum(numbers) / len(numbers), 3) if numbers else None


def compare(random_: dict, pbt: dict) -> dict:
    """PBT against the random search (see the module)."""
    r_frames, p_frames = random_["search_frames_to_threshold"], pbt["search_frames_to_threshold"]
    ratio = round(p_frames / r_frames, 3) if r_frames and p_frames is not None else None
    r_best, p_best = random_["best_return"], pbt["best_return"]
    diff = round(p_best - r_best, 2) if r_best is not None and p_best is not None else None
    fewer = p_frames is not None and (r_frames is None or p_frames < r_frames)
    return {
        "pbt_over_random_frames_to_threshold": ratio,
        "pbt_minus_random_best_return": diff,
        "target_met": bool(fewer or (diff is not None and diff > 0)),
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the searches and prints the JSON line; returns the exit code."""
    from services.config import ConfigError
    from services.run.storage import storage_root

    args = parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or storage_root(None) / f"bench-tune-{stamp}").expanduser().absolute()
    out.mkdir(parents=True, exist_ok=True)
    space = out / "space.yaml"
    if args.space:
        space.write_text(Path(args.space).read_text())
    else:
        space.write_text(yaml.safe_dump(SPACE))
    names = [n for n in args.searches.split(",") if n]
    if not names or any(n not in ("random", "pbt") for n in names):
        print(f"--searches: random and/or pbt, got {args.searches!r}", file=sys.stderr)
        return 2
    report: dict = {"threshold": args.threshold}
    for name in names:
        print(f"bench tune: {name} search starting", file=sys.stderr, flush=True)
        try:
            report[name] = run_one(name, args, space, out)
        except ConfigError as err:
            print(f"relayrl: invalid search: {err}", file=sys.stderr)
            return 2
        (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
        print(f"bench tune: {name}: {json.dumps(report[name])}", file=sys.stderr, flush=True)
    if "random" in report and "pbt" in report:
        report.update(compare(report["random"], report["pbt"]))
    report["space"] = yaml.safe_load(space.read_text())
    report["machine"] = {"cpu_count": os.cpu_count(), "platform": platform.platform()}
    report["args"] = dict(vars(args))
    report["out"] = str(out)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report), flush=True)
    return 1 if any(report[n]["errors"] for n in names) else 0


if __name__ == "__main__":
    sys.exit(main())
