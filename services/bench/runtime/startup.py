"""``python -m services.bench startup``: what a run's start-up is made of on this machine.

A run's ``startup_s`` (process start to the first counted rollout) cannot be shorter than what
it must do before that rollout: start Python, start a local Ray, and start actor processes that
import torch. This bench measures those floors, each in a fresh process, ``--repeats`` times
(the JSON gives the median and every value):

    * ``import_ray_s``, ``import_torch_s``: ``python -c "import ray"`` / ``"import torch"``;
    * ``ray_init_s``: ``ray.init`` of a local cluster as relayrl starts one
      (:func:`replay.local_ray.init_local_ray`, no dashboard), from the call to its return;
    * ``torch_actor_s``: after that, one actor whose constructor imports torch, until it answers;
      ``more_torch_actors_s``: then ``--actors`` more at once (default 4: a small run's shard,
      learner and collectors);
    * ``floor_s``: process start to the first torch actor answering (the least any run needs);
    * ``run_startup_s``: a real run's ``startup_s`` (``python -m services.train`` with
      ``deploy/configs/cartpole_ppo.yaml`` and a 2,048-frame budget), unless ``--no-run``.

Last line of standard output: one JSON object with those keys.

Examples:
    python -m services.bench startup
    python -m services.bench startup --repeats 1 --actors 0 --no-run
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

from learner.algorithms import featured_config

ROOT = Path(__file__).resolve().parents[3]

PROBE = r"""
import json, time
started = time.perf_counter()
import ray
from replay.local_ray import init_local_ray
imported = time.perf_counter()
init_local_ray(num_cpus=8, include_dashboard=False, logging_level="ERROR")
ready = time.perf_counter()

@ray.remote(num_cpus=0.5)
class TorchActor:
    def __init__(self):
        import torch  # noqa: F401  (what every relayrl actor imports)

    def ping(self):
        return True

ray.get(TorchActor.remote().ping.remote())
first = time.perf_counter()
ray.get([actor.ping.remote() for actor in [TorchActor.remote() for _ in range(ACTORS)]])
more = time.perf_counter()
ray.shutdown()
print(json.dumps({"ray_init_s": ready - imported, "torch_actor_s": first - ready,
                  "more_torch_actors_s": more - first, "floor_from_python_s": first - started}))
"""


def _seconds(command: list[str], *, timeout: float = 300.0) -> tuple[float, str]:
    """Runs ``command`` from the repository root; returns (wall seconds, standard output)."""
    started = time.perf_counter()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=True
    )
    return time.perf_counter() - started, done.stdout


def measure_once(*, run: bool, actors: int = 4) -> dict:
    """One fresh-process measurement of every floor (and a real run's ``startup_s``)."""
    python = [sys.executable, "-c"]
    bare, _ = _seconds([*python, "pass"])
    result = {
        "import_ray_s": _seconds([*python, "import ray"])[0] - bare,
        "import_torch_s": _seconds([*python, "import torch"])[0] - bare,
    }
    _, out = _seconds([*python, f"ACTORS = {int(actors)}\n{PROBE}"])
    probe = json.loads(out.strip().splitlines()[-1])
    result.update({k: v for k, v in probe.items() if k != "floor_from_python_s"})
    result["floor_s"] = bare + probe["floor_from_python_s"]
    if run:
        with tempfile.TemporaryDirectory(prefix="relayrl-bench-startup-") as storage:
            _, out = _seconds(
                [
                    sys.executable,
                    "-m",
                    "services.train",
                    "--config",
                    str(ROOT / "deploy" / "configs" / featured_config("bench_startup")),
                    "--set",
                    "controller.total_frames=2048",
                    "--set",
                    "metrics.enabled=false",
                    "--set",
                    "checkpoint.at_end=false",
                    "--set",
                    "checkpoint.interval_frames=0",
                    "--set",
                    "checkpoint.interval_s=0",
                    "--set",
                    f"run.storage={storage}",
                ]
            )
        result["run_startup_s"] = json.loads(out.strip().splitlines()[-1])["startup_s"]
    return result


def summarize(runs: list[dict]) -> dict:
    """Median of each key over ``runs``, and every value (rounded to 10 ms)."""
    report = {}
    for key in runs[0]:
        values = [round(run[key], 2) for run in runs]
        report[key] = round(statistics.median(values), 2)
        report[f"{key}_all"] = values
    return report


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m services.bench startup")
    parser.add_argument("--repeats", type=int, default=3, help="fresh measurements (median)")
    parser.add_argument("--actors", type=int, default=4, help="torch actors started together")
    parser.add_argument("--no-run", action="store_true", help="skip the real run's startup_s")
    args = parser.parse_args(argv)
    runs = []
    for repeat in range(args.repeats):
        runs.append(measure_once(run=not args.no_run, actors=args.actors))
        print(f"repeat {repeat}: {json.dumps(runs[-1])}", file=sys.stderr, flush=True)
    print(json.dumps(summarize(runs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
