"""One run, start to finish: its id and directory, logs, metrics endpoint and controller.

Shared by the CLI (``services.train``, one run) and the sweep (``services.sweep``, several runs
at once in one process on one Ray cluster). Each :class:`Run` owns everything that must not be
shared between concurrent runs: a unique run id (actor names, placement group, the ``run``
label), its own directory (``config.yaml``, ``metrics.jsonl``, ``summary.json``, checkpoint
rotation) and its own Prometheus endpoint (port 0: OS-chosen).

Examples:
    >>> run = prepare_run(load_config(overrides=["seed=1"]))  # doctest: +SKIP
    >>> init_ray(run.config)  # doctest: +SKIP
    >>> summary = run.execute()  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from services.config import RunConfig
from services.driver.controller import Controller
from services.evaluation.evaluator import EvaluationRunner
from services.grpc.server import serve_run
from services.observe.metrics import MetricsExporter
from services.observe.tensorboard import TensorBoardLogger
from services.observe.trackers import Trackers, start_trackers
from services.run.rundir import RunLog, resolve_run_dir, write_summary
from services.run.storage import storage_root

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Run:
    """A prepared run: directory and log written, endpoint serving, controller not yet set up.

    Attributes:
        config: The run's configuration.
        run_id: Its unique id.
        run_dir: Its absolute directory.
        controller: Its controller (``request_stop`` stops it at the next boundary).
        exporter: Its Prometheus exporter (None with ``metrics.enabled: false``).
        trackers: Its MLflow and W&B trackers (None when ``metrics.trackers`` names neither).
    """

    config: RunConfig
    run_id: str
    run_dir: Path
    controller: Controller
    exporter: MetricsExporter | None
    closers: list[Callable[[], None]]
    trackers: Trackers | None = None

    def execute(self) -> dict:
        """Sets up, trains and shuts the run down; writes and returns its summary.

        The summary (the CLI's last line of JSON) names ``run_id``, ``run_dir`` and the last
        ``checkpoint`` (and the trackers' runs, e.g. ``mlflow_run_id``); it is also written to
        ``<run dir>/summary.json``, which the trackers then receive as a file.
        """
        try:
            summary = self.controller.run()
        except BaseException:
            if self.trackers is not None:
                self.trackers.close(status="FAILED")
            raise
        finally:
            for close in reversed(self.closers):
                close()
        summary["run_dir"] = str(self.run_dir)
        last = self.controller.last_checkpoint
        summary["checkpoint"] = str(last) if last else None
        if self.trackers is not None:
            summary.update(self.trackers.fields())
        path = write_summary(self.run_dir, summary)
        if self.trackers is not None:
            videos = sorted(self.run_dir.glob("videos/*.mp4"))
            self.trackers.close([path, self.run_dir / "config.yaml", *videos])
        return summary


def prepare_run(
    config: RunConfig,
    *,
    model_spec=None,
    resume: str | Path | None = None,
    run_id: str | None = None,
    progress: Callable[[Controller, dict], None] | None = None,
    tracker_tags: Mapping[str, str] | None = None,
) -> Run:
    """Creates a run's id and directory, its log and endpoint, and its controller.

    Args:
        config: The validated configuration.

    Keyword Args:
        model_spec: The network spec (read from the env when omitted).
        resume: A checkpoint or rotation directory to resume from (lineage kept, new id).
        run_id: Use this id instead of a fresh one.
        progress: A ``progress`` hook (the CLI's bar or lines; the sweep's prefixed lines).
        tracker_tags: Tags the run's trackers get besides its config (a tune trial's id).

    Returns:
        The prepared run; call :meth:`Run.execute` once Ray is connected.
    """
    run_id, run_dir = resolve_run_dir(
        config.run.name, config.run.dir, config.run.storage, run_id=run_id
    )
    run_log = RunLog(run_dir, config.to_dict())
    closers: list[Callable[[], None]] = [run_log.close]
    logger.info("run %s: directory %s", run_id, run_dir)
    controller = Controller(
        config,
        model_spec=model_spec,
        checkpoint_root=run_dir / "checkpoints",
        resume_from=resume,
        run_id=run_id,
    )
    exporter = None
    if config.metrics.enabled:
        exporter = MetricsExporter(
            config.metrics.host, config.metrics.port, run_id=run_id, sd_dir=config.metrics.sd_dir
        )
        exporter.attach(controller)
        closers.append(exporter.close)
    if config.evaluation.enabled:
        EvaluationRunner(config, controller).attach()  # before the log: snapshots carry it
    if progress is not None:
        controller.register("progress", progress)
    if config.metrics.tensorboard or "tensorboard" in config.metrics.trackers:
        tensorboard = TensorBoardLogger(run_dir / "tensorboard")
        controller.register("progress", tensorboard)
        closers.append(tensorboard.close)
    controller.register("progress", lambda _, snapshot: run_log.write(snapshot))
    trackers = start_trackers(
        config,
        run_id=run_id,
        run_dir=run_dir,
        storage=storage_root(config.run.storage),
        tags=tracker_tags,
    )
    if trackers is not None:
        trackers.attach(controller)
    # A live resize is a record of its own (services.plot marks it on the curves).
    controller.register("resize", lambda _, event: run_log.write({"event": "resize", **event}))
    try:
        server = serve_run(config, controller)  # None unless grpc.port is set; OSError: taken
    except BaseException:
        if trackers is not None:
            trackers.close(status="FAILED")
        raise
    if server is not None:
        closers.append(server.stop)  # health NOT_SERVING, in-flight calls get grpc.grace_s
    return Run(config, run_id, run_dir, controller, exporter, closers, trackers)
