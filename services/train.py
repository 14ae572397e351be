"""``python -m services.train``: run a training job.

Examples:
    python -m services.train
    python -m services.train --config deploy/configs/cartpole_dqn.yaml --set learner.world_size=2

Progress lines go to standard output while the job runs; the last line of standard output is a
JSON summary (``frames``, ``optim_steps``, ``wall_s``, ``frames_per_s``,
``episode_return_mean``, ...). Exit codes: 0 done (or stopped cleanly), 2 invalid config,
1 failure. Without ``RAY_ADDRESS`` the job starts an embedded local Ray sized to its actors.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys

import ray

from services.checkpoint import CheckpointError
from services.checkpointing import resolve_resume
from services.config import ConfigError, RunConfig, load_config
from services.controller import Controller
from services.grpc_server import serve_run
from services.metrics import MetricsExporter
from services.progress import ProgressReporter
from services.rundir import RunLog, resolve_run_dir
from services.spec import model_spec_for
from services.tensorboard import TensorBoardLogger

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
    )


def init_ray(config: RunConfig) -> None:
    """Connects to ``RAY_ADDRESS`` if set, else starts an embedded local Ray on loopback.

    The embedded cluster declares at least as many logical CPUs as the run's actors ask for,
    so a small machine runs the default job (the OS shares the real cores).
    """
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(namespace="relayrl", log_to_driver=True)
        return
    gpus = config.learner.world_size * config.learner.resources_per_rank.get("GPU", 0)
    ray.init(
        address="local",  # never attach to a `ray start` cluster found on this machine
        num_cpus=max(os.cpu_count() or 1, math.ceil(logical_cpus(config))),
        num_gpus=gpus or None,
        include_dashboard=False,
        namespace="relayrl",
        _node_ip_address="127.0.0.1",
    )


def install_signal_handlers(controller: Controller) -> None:
    """First SIGINT/SIGTERM: stop at the next boundary; a second one: exit at once."""

    def handle(signum, frame):
        if controller.stop_requested:
            logger.warning("second signal: exiting now")
            raise KeyboardInterrupt
        logger.warning("signal %d: stopping at the next boundary", signum)
        controller.request_stop(f"signal {signum}")

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)


def main(argv: list[str] | None = None) -> int:
    """Runs the CLI; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = load_config(args.config, args.set)
        model_spec = model_spec_for(config)
        resume = resolve_resume(args.resume, config)[0] if args.resume else None
    except ConfigError as err:
        print(f"relayrl: invalid config: {err}", file=sys.stderr)
        return 2
    except CheckpointError as err:
        print(f"relayrl: cannot resume: {err}", file=sys.stderr)
        return 2
    run_dir = resolve_run_dir(config.run.name, config.run.dir)
    run_log = RunLog(run_dir, config.to_dict())
    logger.info("run directory %s", run_dir)
    init_ray(config)
    controller = Controller(
        config,
        model_spec=model_spec,
        checkpoint_root=run_dir / "checkpoints",
        resume_from=resume,
    )
    exporter = None
    if config.metrics.enabled:
        exporter = MetricsExporter(config.metrics.host, config.metrics.port)
        exporter.attach(controller)
    progress = ProgressReporter()
    controller.register("progress", progress)
    tensorboard = TensorBoardLogger(run_dir / "tensorboard") if config.metrics.tensorboard else None
    if tensorboard is not None:
        controller.register("progress", tensorboard)
    controller.register("progress", lambda _, snapshot: run_log.write(snapshot))
    install_signal_handlers(controller)
    try:
        grpc_server = serve_run(config, controller)  # None unless grpc.port is set
    except OSError as err:
        print(f"relayrl: {err}", file=sys.stderr)
        ray.shutdown()
        return 2
    try:
        summary = controller.run()
    except KeyboardInterrupt:
        logger.warning("interrupted before a clean stop")
        return 130
    finally:
        if grpc_server is not None:
            grpc_server.stop()  # health NOT_SERVING, in-flight calls get grpc.grace_s
        progress.close()
        if tensorboard is not None:
            tensorboard.close()
        if exporter is not None:
            exporter.close()
        run_log.close()
        ray.shutdown()
    summary["run_dir"] = str(run_dir)
    summary["checkpoint"] = str(controller.last_checkpoint) if controller.last_checkpoint else None
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
