"""``python -m services.train``: run a training job.

Examples:
    python -m services.train
    python -m services.train --config deploy/configs/cartpole_dqn.yaml --set learner.world_size=2

Progress lines go to standard output while the job runs; the last line of standard output is a
JSON summary (``run_id``, ``run_dir``, ``frames``, ``optim_steps``, ``wall_s``, ``frames_per_s``,
``episode_return_mean``, ...), also written to ``<run dir>/summary.json``. Each run gets a unique
id ``<run.name>-<YYYYmmdd-HHMMSS>-<token>`` (``services.driver.runid``) naming its actors and its
directory ``<run.storage>/<run id>`` (default ``~/relayrl_results``, ``services.run.storage``).
Exit codes: 0 done (or stopped cleanly), 2 invalid config, 1 failure. Without ``RAY_ADDRESS``
the job starts an embedded local Ray sized to its actors.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import ray

from learner.algorithms import featured_config
from replay.persist.npyio import CheckpointError
from services.checkpoints.resume import resolve_resume
from services.checkpoints.store import CheckpointWriteError
from services.checkpoints.trust import add_trust_arguments, trust_options
from services.config import ConfigError, RunConfig, load_config
from services.config.spec import check_local_gpus, env_spaces, model_spec_for
from services.config.trackers import check_tracker_extras
from services.driver.faults import DeterminismError
from services.driver.placement import PlacementError
from services.observe.progress import ProgressReporter
from services.run.embedded import init_ray, logical_cpus
from services.run.storage import check_run_paths

if TYPE_CHECKING:
    from services.driver.views import StopView

logger = logging.getLogger("relayrl")
PROG = "python -m services.train"

__all__ = ["build_parser", "init_ray", "install_signal_handlers", "logical_cpus", "main"]


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The CLI's argument parser (``prog``: how the user called it)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n")[0].split(": ", 1)[1],
        epilog="examples:\n"
        f"  {prog}\n"
        f"  {prog} --config deploy/configs/{featured_config('help_on_policy')} --set seed=1\n"
        f"  {prog} --config deploy/configs/{featured_config('help')} --set learner.world_size=2\n"
        f"  {prog} --resume ~/relayrl_results/<run id>",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="YAML run config (see deploy/configs/)")
    parser.add_argument(
        "--resume",
        metavar="PATH",
        help="resume from a checkpoint directory or a rotation directory (newest valid one)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="dotted override, e.g. --set learner.world_size=2 (repeatable)",
    )
    add_trust_arguments(parser)  # what --resume trusts
    return parser


def install_signal_handlers(controller: StopView) -> None:
    """First SIGINT/SIGTERM: stop at the next boundary; a second one: exit at once."""

    def handle(signum, frame):
        if controller.stop_requested:
            logger.warning("second signal: exiting now")
            raise KeyboardInterrupt
        logger.warning("signal %d: stopping at the next boundary", signum)
        controller.request_stop(f"signal {signum}")

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)


def _load_driver(config: RunConfig, spaces, model_spec=None):
    """Imports the driver's torch-based modules and builds the model spec (unless given)."""
    launch = importlib.import_module("services.run.launch")
    if model_spec is None:
        model_spec = importlib.import_module("services.config.spec").model_spec_for(config, spaces)
    return launch, model_spec


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Runs the CLI; returns the exit code."""
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = load_config(args.config, args.set)
        check_tracker_extras(config.metrics)  # a missing extra, named before anything starts
        check_run_paths(config)  # never inside a submitted job's working directory
        spaces = env_spaces(config)
        check_local_gpus(config)
        resume = None
        if args.resume:
            trust = trust_options(args)  # the checkpoint may name code: only what is allowed
            resume = resolve_resume(args.resume, config, **trust)[0]
        # A user's network is built and probed before Ray starts (it imports torch here).
        model_spec = model_spec_for(config, spaces) if config.learner.network else None
    except ConfigError as err:
        print(f"relayrl: invalid config: {err}", file=sys.stderr)
        return 2
    except CheckpointError as err:
        print(f"relayrl: cannot resume: {err}", file=sys.stderr)
        return 2
    progress = ProgressReporter()
    try:
        # The config is valid: the driver's heavy imports (torch, the controller) and the model
        # spec load in a helper thread while Ray starts, instead of one after the other.
        with ThreadPoolExecutor(1, thread_name_prefix="imports") as pool:
            loading = pool.submit(_load_driver, config, spaces, model_spec)
            init_ray(config)
            launch, model_spec = loading.result()
        run = launch.prepare_run(config, model_spec=model_spec, resume=resume, progress=progress)
        logger.info("run id %s (actors %s.collector-0, ...)", run.run_id, run.run_id)
        install_signal_handlers(run.controller)  # after ray.init, which installs its own
        summary = run.execute()
    except KeyboardInterrupt:
        logger.warning("interrupted before a clean stop")
        return 130
    except (PlacementError, CheckpointWriteError, DeterminismError) as err:  # e.g. a full disk
        print(f"relayrl: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # the gRPC server could not bind its port
        print(f"relayrl: {err}", file=sys.stderr)
        return 2
    finally:
        progress.close()
        ray.shutdown()
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
