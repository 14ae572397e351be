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
import math
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor

import ray

from collector.config import INLINE_WRITE_ENV
from replay.local_ray import agent_port_chosen_by_os
from replay.npyio import CheckpointError
from services.checkpoints.resume import resolve_resume
from services.config import ConfigError, RunConfig, load_config
from services.config.spec import check_local_gpus, env_spaces
from services.driver.placement import PlacementError
from services.observe.progress import ProgressReporter
from services.run.embedded import own_process_group
from services.run.raytools import log_cluster
from services.run.storage import check_run_paths

logger = logging.getLogger("relayrl")


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m services.train", description=__doc__.split("\n")[0]
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
    return parser


def logical_cpus(config: RunConfig) -> float:
    """Logical CPUs the run's actors ask for."""
    c = config
    return (
        c.collector.num_collectors * c.collector.num_cpus
        + c.replay.num_shards * c.replay.num_cpus
        + c.learner.world_size * c.learner.resources_per_rank.get("CPU", 0)
        + (c.evaluation.num_cpus if c.evaluation.enabled else 0)
    )


def init_ray(*configs: RunConfig) -> None:
    """Connects to ``RAY_ADDRESS`` if set, else starts an embedded local Ray on loopback.

    The embedded cluster declares at least as many logical CPUs as the actors of all
    ``configs`` (the runs that will share it) ask for, so a small machine runs the default job
    or a sweep (the OS shares the real cores). Its dashboard starts only with
    ``ray.dashboard: true`` (a run does not use it, and it adds to every start-up).
    """
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        log_cluster(ray.init(namespace="relayrl", log_to_driver=True))
        return
    gpus = sum(c.learner.world_size * c.learner.resources_per_rank.get("GPU", 0) for c in configs)
    # Every process of the embedded cluster inherits the collectors' inline-write limit, so
    # collectors start in prestarted workers instead of dedicated ones (see collector.group).
    os.environ.update(INLINE_WRITE_ENV)
    # A signal to the driver's process group spares the cluster; another cluster on the machine
    # holding Ray's fixed agent port does not delay the start (replay.local_ray).
    with own_process_group(), agent_port_chosen_by_os():
        context = ray.init(
            address="local",  # never attach to a `ray start` cluster found on this machine
            num_cpus=max(os.cpu_count() or 1, math.ceil(sum(logical_cpus(c) for c in configs))),
            num_gpus=gpus or None,
            include_dashboard=any(c.ray.dashboard for c in configs),
            dashboard_host="127.0.0.1",
            namespace="relayrl",
            _node_ip_address="127.0.0.1",
        )
    log_cluster(context)  # operators point `ray list actors`, `ray status` at the run


def install_signal_handlers(controller) -> None:
    """First SIGINT/SIGTERM: stop at the next boundary; a second one: exit at once."""

    def handle(signum, frame):
        if controller.stop_requested:
            logger.warning("second signal: exiting now")
            raise KeyboardInterrupt
        logger.warning("signal %d: stopping at the next boundary", signum)
        controller.request_stop(f"signal {signum}")

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)


def _load_driver(config: RunConfig, spaces):
    """Imports the driver's torch-based modules and builds the model spec."""
    launch = importlib.import_module("services.run.launch")
    return launch, importlib.import_module("services.config.spec").model_spec_for(config, spaces)


def main(argv: list[str] | None = None) -> int:
    """Runs the CLI; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = load_config(args.config, args.set)
        check_run_paths(config)  # never inside a submitted job's working directory
        spaces = env_spaces(config)
        check_local_gpus(config)
        resume = resolve_resume(args.resume, config)[0] if args.resume else None
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
            loading = pool.submit(_load_driver, config, spaces)
            init_ray(config)
            launch, model_spec = loading.result()
        run = launch.prepare_run(config, model_spec=model_spec, resume=resume, progress=progress)
        logger.info("run id %s (actors %s.collector-0, ...)", run.run_id, run.run_id)
        install_signal_handlers(run.controller)  # after ray.init, which installs its own
        summary = run.execute()
    except KeyboardInterrupt:
        logger.warning("interrupted before a clean stop")
        return 130
    except PlacementError as err:
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
