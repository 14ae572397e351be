"""The thin driver controller: the run's shared runtime; a loop decides what to issue.

The driver holds counters and references, never batches: collectors write straight into their
replay shards, learners sample straight from them, weights travel as object-store references.
The :class:`Controller` owns what every algorithm shares: setup and ordered restore, rollout
and step receipts, weight hand-off by ``(generation, version)``, learner recovery, stop
requests, consistent checkpoints, hooks and progress. The per-algorithm schedule is a loop
(``services.driver.loops``: off-policy, on-policy) picked by the recipe (``config.recipes``).

What a receipt counts is ``services.driver.accounting`` (frames once, from receipts, times
``frame_skip``), when a checkpoint or progress line is due ``cadence``, the hooks ``hooks``; the
parts that read the run see it through the typed views of ``services.driver.views``.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ray

from collector.manage.completions import Finished
from collector.manage.group import CollectorGroup
from learner.ranks.group import LearnerGroup, PendingRound
from learner.receipts import ProtocolError, PublishedWeights, StepReceipt
from replay.client import ReplayClient
from replay.shard import remote_shards
from replay.wire.batches import ExternalReceipt
from services.checkpoints.cut import (
    CheckpointWriteError,
    checkpoint_now,
    recover_learners,
    restore_learners,
    restore_services,
)
from services.checkpoints.retention import make_store
from services.checkpoints.store import latest_valid, read_json
from services.config import RunConfig
from services.config.recipes import algorithm_for
from services.config.spec import model_spec_for
from services.driver.accounting import Accounting, ReturnGoals
from services.driver.actors import start_collectors, start_learners
from services.driver.autoscale import size_fleet
from services.driver.cadence import CheckpointCadence, ProgressCadence
from services.driver.elastic import Elastic
from services.driver.hooks import Hook, Hooks
from services.driver.inbox import Inbox  # gRPC
from services.driver.inflight import InFlight
from services.driver.loops import make_loop
from services.driver.placement import ServicePlacement, release_services, reserve_services
from services.driver.ports import EvaluationPort
from services.driver.recovery import Recovery
from services.driver.runid import new_run_id
from services.driver.stats import RateMeter, RunCounters
from services.driver.views import Loop
from services.observe import report
from services.observe.early_stop import EarlyStopping

logger = logging.getLogger(__name__)


class Controller:
    """Runs one training job on the connected Ray cluster.

    Args:
        config: The validated run configuration.

    Keyword Args:
        model_spec: The policy's network spec; built from the env and the algorithm when
            omitted.
        checkpoint_root: Rotation directory when ``checkpoint.dir`` is not set (None and no
            ``checkpoint.dir``: checkpoints off).
        resume_from: A checkpoint or rotation directory to restore in :meth:`setup`.
        run_id: Unique id naming the run's actors (default: ``services.driver.runid.new_run_id``).

    Examples:
        >>> from services.config import load_config
        >>> config = load_config(overrides=["controller.total_frames=5000"])
        >>> controller = Controller(config)  # doctest: +SKIP
        >>> summary = controller.run()  # sets up, trains, shuts down  # doctest: +SKIP
    """

    def __init__(
        self,
        config: RunConfig,
        *,
        model_spec=None,
        checkpoint_root: str | Path | None = None,
        resume_from: str | Path | None = None,
        run_id: str | None = None,
    ) -> None:
        self.config = config
        self.run_id = run_id or new_run_id(config.run.name)
        self.lineage: list[str] = []  # ids of the runs a resumed run continues (checkpoints)
        self.placement: ServicePlacement | None = None  # reserved in setup()
        root = config.checkpoint.dir or checkpoint_root
        self.checkpoints = make_store(root, config.checkpoint, self.run_id) if root else None
        self.resume_from = Path(resume_from) if resume_from else None
        self.last_checkpoint: Path | None = None
        self.cadence = CheckpointCadence.from_config(
            config.checkpoint, config.controller.total_frames
        )
        self.progress_cadence = ProgressCadence(config.controller.log_interval_s)
        self.model_spec = model_spec or model_spec_for(config)
        self.algorithm = algorithm_for(config)
        self.loop: Loop = make_loop(self, self.algorithm.loop)
        self.accounting = Accounting(
            config.collector.frame_skip,
            ReturnGoals.from_config(config.controller),
            external_steer=config.grpc.external_returns_steer,
        )
        self.hooks = Hooks(self)
        self.shards: list = []
        self.replay: ReplayClient | None = None
        self.collectors: CollectorGroup | None = None
        self.learners: LearnerGroup | None = None
        self.weights: PublishedWeights | None = None
        self.inflight = InFlight(config.collector.fleet_size, config.collector.max_inflight)
        self.pending_round: PendingRound | None = None
        self.stop_requested = False
        self.early_stopping = EarlyStopping.from_config(config.controller)
        self.stop_reason: str | None = None
        self.last_learner_metrics: dict[str, float] = {}
        self.wall_s = 0.0
        self.rates = RateMeter()
        self.inbox = Inbox()  # gRPC: requests from server threads, served at loop boundaries
        self.recovery = Recovery(self)  # faults: shard health, crash loops, stuck rollouts
        self.evaluation: EvaluationPort | None = None  # evaluation.evaluator.EvaluationRunner
        self.elastic = Elastic(self)  # live resizes (gRPC Scale, collector.num_collectors: auto)

    @property
    def counters(self) -> RunCounters:
        """The run's counters (``accounting.counters``)."""
        return self.accounting.counters

    # -- hooks -------------------------------------------------------------------------------
    def register(self, event: str, hook: Hook) -> None:
        """Calls ``hook(controller, *args)`` at a loop boundary (events: ``driver.hooks``)."""
        self.hooks.register(event, hook)

    def emit(self, event: str, *args) -> None:
        """Calls the hooks registered for ``event``."""
        self.hooks.emit(event, *args)

    # -- lifecycle ---------------------------------------------------------------------------
    def setup(self) -> None:
        """Starts replay shards, collectors and the learner group; publishes version 0.

        Every actor starts at once (the learners' placement and rendezvous run in a helper
        thread while the collectors build their envs); on resume the services' state is restored
        before the learners' (replay, collectors, driver counters, then a new learner generation).
        """
        cfg = self.config
        name, det = self.run_id, cfg.run.deterministic
        checkpoint = None
        if self.resume_from is not None:
            checkpoint, _ = latest_valid(self.resume_from)
            saved = read_json(checkpoint / "driver.json")["counters"]["generation"]
            self.counters.generation = saved + 1
        if cfg.collector.auto:  # as many collectors as the cluster offers, followed live
            cfg = size_fleet(self)
        self.placement = placement = reserve_services(cfg, name)
        self.shards = remote_shards(
            name, cfg.replay, seed=cfg.seed, scheduling=placement.shards, deterministic=det
        )
        self.replay = ReplayClient(self.shards, seed=cfg.seed)
        self.recovery.watch_shards(self.shards)
        self.collectors = start_collectors(
            cfg,
            name,
            self.model_spec,
            self.algorithm,
            placement.collectors,
            self.counters.generation,
        )
        with ThreadPoolExecutor(1, thread_name_prefix="learner-setup") as pool:
            learners = pool.submit(self.start_learners, self.counters.generation)
            try:
                self.collectors.wait_ready()
                if checkpoint is not None:
                    restore_services(self, checkpoint)  # replay, collectors, driver counters
                    self.counters.generation += 1
            finally:
                self.learners = learners.result()
        if checkpoint is not None:
            restore_learners(self, checkpoint)
            self.last_checkpoint = checkpoint
            logger.info(
                "resumed from %s at %d frames, version %d (generation %d)",
                checkpoint,
                self.counters.collected_frames,
                self.counters.model_version,
                self.counters.generation,
            )
        self.begin()

    def begin(self) -> None:
        """The end of setup, once every service answers: weights out, clocks started.

        Publishes the learners' weights (forced), hands them to every collector, starts the
        training clock and the progress cadence, then calls the ``setup`` hooks.
        """
        assert self.learners is not None and self.collectors is not None  # started
        self.accept_weights(self.learners.publish(), force=True)
        self.collectors.sync_weights(self.weights)
        self.elastic.attach()
        self.accounting.start()
        self.rates = RateMeter()
        self.progress_cadence.start()
        self.emit("setup")

    def start_learners(self, generation: int | None = None) -> LearnerGroup:
        """Starts a learner group of ``generation`` (default: the current one)."""
        generation = self.counters.generation if generation is None else generation
        return start_learners(self.config, self.run_id, self.model_spec, self.shards, generation)

    def checkpoint(self) -> Path | None:
        """Cuts a consistent checkpoint now (None when checkpoints are off or one is skipped).

        Raises:
            services.checkpoints.cut.CheckpointWriteError: The disk refused the checkpoint
                (logged with the path and counted; the staging directory is removed).
        """
        return checkpoint_now(self)

    def use_config(self, config: RunConfig) -> None:
        """Runs on ``config`` from now on (a live resize changed its sizes)."""
        self.config = config
        self.loop.config = config

    def shutdown(self) -> None:
        """Stops every actor this controller started (idempotent)."""
        self.emit("shutdown")
        if self.learners is not None:
            self.learners.shutdown()
            self.learners = None
        if self.collectors is not None:
            self.collectors.shutdown()
            self.collectors = None
        for shard in self.shards:
            ray.kill(shard, no_restart=True)
        self.shards = []
        release_services(self.placement)

    def request_stop(self, reason: str = "stop requested") -> None:
        """Asks the loop to stop at the next boundary (signal-safe)."""
        if not self.stop_requested:
            self.stop_reason = reason
        self.stop_requested = True

    def check_early_stop(self, snapshot: dict) -> None:
        """Feeds early stopping its metric from ``snapshot`` (progress, round or evaluation)."""
        if self.early_stopping is None or self.stop_requested:
            return
        value = self.early_stopping.value_in(snapshot)
        reason = self.early_stopping.update(self.counters.collected_frames, value)
        if reason is not None:
            logger.warning("early stop: %s", reason)
            self.request_stop(f"early stop: {reason}")

    def run(self) -> dict:
        """Sets up (if needed), trains until done or stopped, shuts down; returns the summary."""
        try:
            if self.learners is None:
                self.setup()
            self.train()
            return self.summary()
        finally:
            self.shutdown()

    # -- shared by the loops ----------------------------------------------------------------
    def exploration(self) -> dict[str, Any]:
        """Exploration parameters for the next rollout (the algorithm's schedule)."""
        return self.algorithm.exploration(self.config, self.counters.collected_frames)

    def steps_target(self) -> int:
        """Optimizer steps owed by UTD pacing (0 for loops that do not pace by frames)."""
        target = getattr(self.loop, "steps_target", None)
        return target() if target is not None else 0

    def _on_rollout(self, finished: Finished) -> None:
        if finished.ticket not in self.inflight:
            return  # not issued by the loops (a caller of the group's own)
        self.inflight.pop(finished.ticket)
        receipt = self.recovery.receipt(finished)  # None: the rollout failed
        if receipt is None:
            return
        self._stop_at_return(self.accounting.count(receipt))
        self.recovery.note_writes(receipt.writes)
        self.emit("rollout", receipt)

    def _on_round(self) -> None:
        assert self.learners is not None and self.pending_round is not None  # a round is out
        try:
            receipt: StepReceipt = self.learners.finish_round(self.pending_round)
        except ProtocolError as err:
            # A dead or unreachable rank fails the generation: restore it; a protocol breach
            # between live ranks is a bug and stays fatal.
            if not isinstance(err.__cause__, ray.exceptions.RayError | TimeoutError):
                raise
            recover_learners(self, err)
            return
        self.pending_round = None
        self.accounting.count_round(receipt)
        if receipt.published is not None:
            self.accept_weights(receipt.published)
        self.last_learner_metrics = receipt.metrics
        self.check_early_stop({"learner": receipt.metrics})
        self.emit("round", receipt)

    def clear_replay(self) -> int:
        """Empties every replay shard (on-policy iteration boundary); returns items dropped."""
        self.recovery.cleared()
        assert self.replay is not None  # set up
        return self.replay.clear()

    def count_external(self, receipt: ExternalReceipt) -> None:
        """Counts an external actor's stored batch (gRPC) exactly like a rollout's frames."""
        self._stop_at_return(self.accounting.count(receipt, external=True))
        self.emit("external", receipt)

    def _stop_at_return(self, reason: str | None) -> None:
        if reason is not None and not self.stop_requested:  # controller.stop_return reached
            logger.info("%s; stopping", reason)
            self.request_stop(reason)

    def accept_weights(self, weights: PublishedWeights, *, force: bool = False) -> None:
        """Keeps ``weights`` if newer by (generation, version), or always with ``force``."""
        if not force and self.weights is not None and weights.key <= self.weights.key:
            return
        self.weights = weights
        self.counters.published_version = weights.version

    def wait_and_process(self, timeout: float) -> bool:
        """Waits for a rollout or the learner round, then counts what finished.

        Its cost is that of what finished: rollouts come back through the collector group's
        completion queue (``collector.manage.completions``), never from a scan of all in flight.

        Returns:
            False when nothing was in flight.
        """
        self.recovery.check()  # restarted or stuck replay shards, stuck rollouts
        round_ = self.pending_round
        if not self.inflight and round_ is None:
            return False
        assert self.collectors is not None  # set up
        completions = self.collectors.completions  # a round's readiness wakes the wait below
        ready = round_ is not None and completions.ready(round_.refs)
        for finished in self.collectors.completed(0 if ready else timeout):
            self._on_rollout(finished)
        if round_ is not None and completions.ready(round_.refs):
            self._on_round()
        return True

    def maybe_checkpoint(self) -> Path | None:
        """Cuts a due checkpoint (``checkpoint.interval_*``); one the disk refuses: logged, None."""
        if self.stop_requested or not self.cadence.due(self.counters.collected_frames):
            return None
        try:
            return self.checkpoint()
        except CheckpointWriteError:
            return None

    def progress(self, *, force: bool = False) -> None:
        """Emits a progress snapshot (and checks early stopping) once per ``log_interval_s``."""
        if not self.progress_cadence.take(force=force):
            return
        snapshot = self.snapshot()
        if not force:
            self.check_early_stop(snapshot)
        self.emit("progress", snapshot)

    def train(self) -> None:
        """Runs the algorithm's loop until the frame budget is done, or a stop.

        Checkpoints are cut every ``checkpoint.interval_frames``, and at the end when stopped
        or (with ``checkpoint.at_end``) when the budget is reached.
        """
        self.loop.run()
        self.emit("train_end")  # e.g. the final evaluation, before the final checkpoint
        assert self.collectors is not None  # set up
        if self.weights is not None:
            self.collectors.sync_weights(self.weights)  # collectors end on the newest version
        self.wall_s = self.accounting.elapsed_s()
        if self.stop_requested or self.config.checkpoint.at_end:
            self.checkpoint()
        self.progress(force=True)

    # -- reporting ---------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """Counters and rates for progress lines and metrics (see ``services.observe.report``)."""
        return report.snapshot(self)

    def summary(self) -> dict:
        """The run's final figures (the CLI prints them as its last line of JSON)."""
        return report.summary(self)
