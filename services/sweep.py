"""``python -m services.sweep``: several runs at once (seeds, and a grid over config values).

Examples:
    python -m services.sweep --seeds 0,1,2
    python -m services.sweep --seeds 0,1,2 --config deploy/configs/cartpole_dqn.yaml
    python -m services.sweep --grid learner.lr=1e-3,5e-4 --grid controller.utd_ratio=0.5,1

Every combination of a grid point (the product of the ``--grid KEY=V1,V2`` values) and a seed
is one run with its own run id, actors, placement group, directory and Prometheus endpoint.
All runs are launched at once (``--max-concurrent`` to cap them) on the connected cluster
(``RAY_ADDRESS``, e.g. inside one ``ray job submit``) or on one embedded local Ray sized for all
of them. Each run's driver (its :class:`~services.driver.controller.Controller`) is a thread of this
process: drivers only wait on receipts, so threads cost little, and the runs' directories and
summaries are local to the sweep.

Progress lines are prefixed with the run's grid point and seed. The sweep directory
(``--dir``, default ``<run.storage>/sweep-<run.name>-<timestamp>-<token>``) holds one directory
per run, ``runs.csv`` (each run's summary figures), ``points.csv`` (mean and standard deviation
across seeds per grid point), ``summary.md`` (both tables), ``return_vs_frames.png`` (return vs
frames: each seed, the mean and a ±1 std band) and ``sweep.json``. The last line of standard
output is a JSON object naming them, with the sweep's wall time. Exit codes: 0 when every run
succeeded, 1 when one failed, 2 for invalid arguments or configs (before anything starts).
SIGINT/SIGTERM stop every run at its next boundary (each cuts a final checkpoint).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

import ray

from learner.algorithms import featured_config
from services.config import ConfigError, RunConfig, load_config
from services.config.spec import model_spec_for
from services.config.trackers import check_tracker_extras
from services.driver.runid import new_run_id, random_token
from services.observe.progress import progress_line
from services.observe.sweep_report import (
    plot_sweep,
    point_label,
    point_rows,
    run_rows,
    write_results,
    write_tables,
)
from services.run.embedded import init_ray
from services.run.launch import Run, prepare_run
from services.run.storage import check_run_paths, storage_root

logger = logging.getLogger("relayrl.sweep")
PROG = "python -m services.sweep"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The sweep CLI's argument parser (``prog``: how the user called it)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n")[0].split(": ", 1)[1],
        epilog="examples:\n"
        f"  {prog} --seeds 0,1,2\n"
        f"  {prog} --seeds 0,1,2 --config deploy/configs/{featured_config('help')}\n"
        f"  {prog} --grid learner.lr=1e-3,5e-4 --grid controller.utd_ratio=0.5,1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--config", help="YAML run config (see deploy/configs/)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run"
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="values to sweep (repeatable: the product of all grids, times the seeds)",
    )
    parser.add_argument("--dir", help="sweep directory (default <run.storage>/sweep-...)")
    parser.add_argument(
        "--max-concurrent", type=int, default=0, help="runs at once (default 0: all)"
    )
    return parser


def split_values(text: str) -> list[str]:
    """Splits ``a,[1, 2],b`` on the commas outside brackets."""
    values, depth, current = [], 0, ""
    for char in text:
        depth += char in "[{"
        depth -= char in "]}"
        if char == "," and depth == 0:
            values.append(current.strip())
            current = ""
        else:
            current += char
    values.append(current.strip())
    return [v for v in values if v]


def parse_seeds(text: str) -> list[int]:
    """``0,1,2`` -> ``[0, 1, 2]``.

    Raises:
        ConfigError: If a seed is not an integer or a seed repeats.
    """
    try:
        seeds = [int(s) for s in split_values(text)]
    except ValueError as err:
        raise ConfigError(f"--seeds: must be comma-separated integers, got {text!r}") from err
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds: must be distinct integers, got {text!r}")
    return seeds


def grid_points(grids: list[str]) -> list[dict[str, str]]:
    """The product of ``KEY=V1,V2`` grids as a list of ``{key: value}`` points.

    Raises:
        ConfigError: If a grid has no ``=`` or no value, or a key is swept twice.
    """
    axes: dict[str, list[str]] = {}
    for grid in grids:
        key, sep, values = grid.partition("=")
        if not sep or not key.strip() or not split_values(values):
            raise ConfigError(f"--grid {grid!r}: expected KEY=V1,V2, e.g. learner.lr=1e-3,5e-4")
        if key.strip() in axes:
            raise ConfigError(f"--grid {key.strip()}: swept twice")
        axes[key.strip()] = split_values(values)
    return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]


def plan(args: argparse.Namespace) -> list[tuple[dict[str, str], int, RunConfig]]:
    """Every run of the sweep as (grid point, seed, validated config), before anything starts.

    Raises:
        ConfigError: Naming the bad argument or field.
    """
    runs = []
    for point in grid_points(args.grid):
        for seed in parse_seeds(args.seeds):
            overrides = [*args.set, *(f"{k}={v}" for k, v in point.items()), f"seed={seed}"]
            config = load_config(args.config, overrides)
            if config.run.dir:
                raise ConfigError("run.dir: must be unset in a sweep (each run gets its own)")
            if config.metrics.enabled and config.metrics.port:
                raise ConfigError(
                    f"metrics.port: must be 0 in a sweep (one endpoint per run), "
                    f"got {config.metrics.port}"
                )
            model_spec_for(config)  # an unknown env fails here, not in a thread
            check_tracker_extras(config.metrics)
            runs.append((point, seed, config))
    return runs


class Sweep:
    """The runs of one sweep, launched together on one Ray cluster.

    Args:
        runs: (grid point, seed, config) per run, as :func:`plan` returns them.
        sweep_dir: Where the runs' directories and the sweep's outputs go.

    Keyword Args:
        max_concurrent: Runs at once (0: all).
        stream: Where progress lines go (standard output by default).
    """

    def __init__(self, runs, sweep_dir: Path, *, max_concurrent: int = 0, stream=None) -> None:
        self.plan = runs
        self.sweep_dir = sweep_dir
        self.max_concurrent = max_concurrent or len(runs)
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()
        self.stopping = False
        self.active: list[Run] = []

    def say(self, line: str) -> None:
        """Prints one line (thread-safe)."""
        with self.lock:
            print(line, file=self.stream, flush=True)

    def request_stop(self, reason: str) -> None:
        """Stops every running run at its next boundary; queued runs do not start."""
        self.stopping = True
        with self.lock:
            active = list(self.active)
        for run in active:
            run.controller.request_stop(reason)

    def _one(self, point: dict, seed: int, config: RunConfig) -> dict:
        label = f"[{point_label(point)} seed={seed}]"
        result = {"point": point_label(point), "seed": seed, "status": "queued"}
        result.update(run_id=None, run_dir=None, summary=None, error=None)
        if self.stopping:
            result["status"] = "skipped"
            return result
        config = dataclasses.replace(
            config, run=dataclasses.replace(config.run, storage=str(self.sweep_dir))
        )
        run = prepare_run(
            config,
            run_id=new_run_id(config.run.name, token=random_token()),
            progress=lambda _, snapshot: self.say(f"{label} {progress_line(snapshot)}"),
        )
        result.update(run_id=run.run_id, run_dir=str(run.run_dir))
        with self.lock:
            self.active.append(run)
        self.say(f"{label} run {run.run_id} -> {run.run_dir}")
        try:
            result["summary"] = run.execute()
            result["status"] = "succeeded"
        except Exception as err:  # one failed run must not end the others
            logger.exception("run %s failed", run.run_id)
            result.update(status="failed", error=f"{type(err).__name__}: {err}")
        finally:
            with self.lock:
                self.active.remove(run)
        self.say(f"{label} {result['status']}")
        return result

    def run(self) -> list[dict]:
        """Runs every run (up to ``max_concurrent`` at once); returns results in plan order."""
        with ThreadPoolExecutor(self.max_concurrent, thread_name_prefix="run") as pool:
            futures = [pool.submit(self._one, *item) for item in self.plan]
            pending = set(futures)
            while pending:  # short waits keep the main thread free for signal handlers
                _, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
        return [future.result() for future in futures]


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Runs the sweep CLI; returns the exit code."""
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    started = time.perf_counter()
    try:
        runs = plan(args)
        if args.max_concurrent < 0:
            raise ConfigError(f"--max-concurrent: must be >= 0, got {args.max_concurrent}")
        check_run_paths(runs[0][2], **{"--dir": args.dir})
    except ConfigError as err:
        print(f"relayrl: invalid sweep: {err}", file=sys.stderr)
        return 2
    first = runs[0][2]
    sweep_id = new_run_id(f"sweep-{first.run.name}", token=random_token())
    sweep_dir = Path(args.dir or storage_root(first.run.storage) / sweep_id).expanduser().absolute()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    logger.info("sweep %s: %d runs in %s", sweep_id, len(runs), sweep_dir)
    sweep = Sweep(runs, sweep_dir, max_concurrent=args.max_concurrent)

    def handle(signum, frame):
        if sweep.stopping:
            raise KeyboardInterrupt
        logger.warning("signal %d: stopping every run at its next boundary", signum)
        sweep.request_stop(f"signal {signum}")

    try:
        init_ray(*(config for _, _, config in runs))
        signal.signal(signal.SIGINT, handle)  # after ray.init, which installs its own
        signal.signal(signal.SIGTERM, handle)
        results = sweep.run()
    except KeyboardInterrupt:
        logger.warning("interrupted before a clean stop")
        return 130
    finally:
        ray.shutdown()
    rows = run_rows(results)
    points = point_rows(rows)
    tables = write_tables(sweep_dir, rows, points)
    plot = plot_sweep(sweep_dir, results)
    wall_s = round(time.perf_counter() - started, 3)
    record = {
        "sweep_id": sweep_id,
        "sweep_dir": str(sweep_dir),
        "argv": sys.argv[1:] if argv is None else argv,
        "wall_s": wall_s,
        "runs": rows,
        "points": points,
        "errors": {r["run_id"]: r["error"] for r in results if r["error"]},
    }
    write_results(sweep_dir, record)
    print(tables["markdown"].read_text(), flush=True)
    final = {"sweep_dir": str(sweep_dir), "wall_s": wall_s, "plot": str(plot)}
    final.update({name: str(path) for name, path in tables.items()})
    final["runs"] = [{k: r[k] for k in ("run_id", "seed", "point", "status")} for r in rows]
    print(json.dumps(final), flush=True)
    return 0 if all(r["status"] == "succeeded" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
