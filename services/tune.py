"""``python -m services.tune``: adaptive search over relayrl runs on Ray Tune (PBT, PB2, ASHA).

Examples:
    python -m services.tune --config deploy/configs/cartpole_dqn.yaml --space space.yaml
        --scheduler asha --num-samples 4 --max-frames 40000
    python -m services.tune --config deploy/configs/lunarlander_ppo.yaml --space space.yaml
        --scheduler pbt --num-samples 4 --max-frames 1000000 --perturbation-frames 100000
    python -m services.tune --resume ~/relayrl_results/tune-cartpole-dqn-<timestamp>-<token>

Each trial is a relayrl run (its own run id, directory, actors, placement groups, Prometheus
endpoint) on the connected Ray cluster (``RAY_ADDRESS``) or on one embedded local Ray sized for
``--max-concurrent`` runs; its driver lives in the trial's Tune actor (``services.search.trial``).
The space (``--space``, ``services.search.space``) and every trial's config are checked before
anything starts. Trials report progress with ``frames`` as the time attribute and hand Tune the
run's consistent checkpoints; a PBT exploit resumes the receiver from the donor's checkpoint
with the mutated config.

The tune directory (``--dir``, default ``<run.storage>/tune-<run.name>-<timestamp>-<token>``)
holds every trial's run directory, Tune's experiment state (``tune/``), ``trials.csv``,
``lineage.jsonl`` (one line per exploit: frame, donor, receiver, mutation), ``best.json`` (the
best trial's config, run dir and checkpoint), ``return_vs_frames.png`` and ``search.json`` (the
arguments, read back by ``--resume``). The last line of standard output is a JSON object with
``dir``, ``trials``, ``stopped_early``, ``exploits``, ``best_return``, ``best_run_dir``, ...
Exit codes: 0 done, 1 when a trial failed, 2 for invalid arguments (before anything starts),
130 when interrupted (Ctrl-C/SIGTERM stop every trial with a final checkpoint; ``--resume DIR``
continues the search).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import os
import signal
import sys
import time
from pathlib import Path

from learner.algorithms import featured_config
from services.config import ConfigError, config_from_dict
from services.config.spec import model_spec_for
from services.config.trackers import check_tracker_extras
from services.driver.runid import new_run_id, random_token
from services.run.storage import check_run_paths, storage_root
from services.search.schedulers import SCHEDULERS
from services.search.space import check_space, load_space, raw_config

logger = logging.getLogger("relayrl.tune")
PROG = "python -m services.tune"
TUNE_EXTRA = 'pip install "relayrl[tune]"'


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The tune CLI's argument parser (``prog``: how the user called it)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n")[0].split(": ", 1)[1],
        epilog="examples:\n"
        f"  {prog} --config deploy/configs/{featured_config('help')} --space space.yaml "
        "--scheduler asha --num-samples 4 --max-frames 40000\n"
        f"  {prog} --resume ~/relayrl_results/tune-<name>-<timestamp>-<token>",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="YAML run config (see deploy/configs/)")
    parser.add_argument("--space", help="YAML search space: field -> distribution or list")
    parser.add_argument("--scheduler", choices=SCHEDULERS, default="fifo")
    parser.add_argument("--num-samples", type=int, default=1, help="samples (per grid point)")
    parser.add_argument(
        "--metric", default="episode_return_mean", help="maximized, e.g. evaluation/..."
    )
    parser.add_argument("--max-frames", type=int, help="frames per trial (controller.total_frames)")
    parser.add_argument(
        "--perturbation-frames",
        type=int,
        default=0,
        help="PBT/PB2 interval, ASHA's first rung (default: an eighth of --max-frames)",
    )
    parser.add_argument("--max-concurrent", type=int, default=0, help="trials at once (0: all)")
    parser.add_argument("--dir", help="tune directory (default <run.storage>/tune-...)")
    parser.add_argument("--resume", metavar="DIR", help="continue an interrupted search")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override for every trial"
    )
    return parser


def check_tune_installed(scheduler: str) -> None:
    """Refuses a missing ``tune`` extra (or PB2's scikit-learn), naming the extra.

    Raises:
        ConfigError: With the install command.
    """
    try:
        import ray.tune  # noqa: F401  (its own check of pandas and pyarrow)
    except ImportError:
        raise ConfigError(f"relayrl tune needs the tune extra: {TUNE_EXTRA}") from None
    if scheduler == "pb2" and importlib.util.find_spec("sklearn") is None:
        raise ConfigError(f"--scheduler pb2 needs scikit-learn (the tune extra): {TUNE_EXTRA}")


def plan(args: argparse.Namespace) -> dict:
    """Everything the search needs, checked before anything starts.

    Raises:
        ConfigError: Naming the bad argument or field.
    """
    if not args.space:
        raise ConfigError("--space: required (a YAML file of fields and distributions)")
    if args.num_samples < 1:
        raise ConfigError(f"--num-samples: must be >= 1, got {args.num_samples}")
    if args.max_concurrent < 0:
        raise ConfigError(f"--max-concurrent: must be >= 0, got {args.max_concurrent}")
    if args.perturbation_frames < 0:
        raise ConfigError(f"--perturbation-frames: must be >= 0, got {args.perturbation_frames}")
    dims = load_space(args.space)
    raw = raw_config(args.config, args.set)
    base = config_from_dict(raw)
    max_frames = args.max_frames or base.controller.total_frames
    if max_frames < 1:
        raise ConfigError(f"--max-frames: must be >= 1, got {max_frames}")
    if base.run.dir:
        raise ConfigError("run.dir: must be unset in a search (each trial gets its own)")
    if base.metrics.enabled and base.metrics.port:
        raise ConfigError(f"metrics.port: must be 0 in a search, got {base.metrics.port}")
    perturbation = args.perturbation_frames or max(max_frames // 8, 1)
    fixed: dict = {"controller.total_frames": max_frames}
    if args.scheduler in ("pbt", "pb2"):  # a cut at every perturbation: the exploit's source
        interval = base.checkpoint.interval_frames
        fixed["checkpoint.interval_frames"] = min(interval or perturbation, perturbation)
        fixed["checkpoint.keep"] = max(base.checkpoint.keep, 2)
    check_space(dims, raw, args.scheduler, fixed)
    config = config_from_dict(raw, fixed)
    check_tracker_extras(config.metrics)
    model_spec_for(config)  # an unknown env or a bad network fails here
    check_tune_installed(args.scheduler)
    check_run_paths(config, **{"--dir": args.dir})
    grid = math.prod(len(d.values) for d in dims if d.kind == "grid")
    return {
        "dims": dims,
        "raw": raw,
        "fixed": fixed,
        "config": config,
        "max_frames": max_frames,
        "perturbation_frames": perturbation,
        "trials": grid * args.num_samples,
    }


def main(argv: list[str] | None = None, prog: str = PROG, *, callbacks=None) -> int:
    """Runs the tune CLI; returns the exit code.

    Args:
        argv: The arguments (default: the command line).
        prog: How the user called it.

    Keyword Args:
        callbacks: ``ray.tune.Callback`` objects for a fresh search (from Python).
    """
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    started = time.perf_counter()
    resume_dir = None
    try:
        if args.resume:
            resume_dir = Path(args.resume).expanduser().absolute()
            saved = resume_dir / "search.json"
            if not saved.exists():
                raise ConfigError(f"--resume {resume_dir}: no search.json (not a tune directory)")
            args = argparse.Namespace(**{**json.loads(saved.read_text()), "resume": None})
            args.dir = str(resume_dir)
        search = plan(args)
    except ConfigError as err:
        print(f"relayrl: invalid search: {err}", file=sys.stderr)
        return 2
    config = search["config"]
    tune_id = new_run_id(f"tune-{config.run.name}", token=random_token())
    tune_dir = Path(args.dir or storage_root(config.run.storage) / tune_id).expanduser().absolute()
    tune_dir.mkdir(parents=True, exist_ok=True)
    (tune_dir / "search.json").write_text(json.dumps(vars(args), indent=1) + "\n")
    from services.search.driver import run_search

    def to_interrupt(signum, frame):  # SIGTERM: Tune's own clean stop of every trial
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGTERM, to_interrupt)
    try:
        final = run_search(
            args, search, tune_dir, resume=resume_dir is not None, callbacks=callbacks
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    final["wall_s"] = round(time.perf_counter() - started, 3)
    print(json.dumps(final), flush=True)
    if final["interrupted"]:
        return 130
    return 1 if final["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
