"""The thin driver controller: frame accounting, UTD pacing, weight hand-off, stop handling.

The driver holds counters and references, never batches: collectors write straight into their
replay shards, learners sample straight from them, and weights travel as object-store
references. One loop (see :meth:`Controller.run`):

1. keep each collector busy with up to ``collector.max_inflight`` rollouts while the frames
   counted plus the frames in flight are below ``total_frames`` (so the budget is overshot by
   less than one rollout) and the learners are not trailing by more than ``max_lag_steps``;
2. count frames from each rollout receipt (``frames * frame_skip``), collect episode stats;
3. once ``init_random_frames`` are in and replay holds a global batch, keep one learner round
   in flight so that optimizer steps track ``utd_ratio * (frames - init_random_frames)``;
4. on each verified step receipt: count steps, keep the published weights; every following
   rollout call hands them to collectors that are behind;
5. stop at ``total_frames`` (after the owed learner steps) or on :meth:`request_stop`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import ray

from collector.group import CollectorGroup
from collector.policy import ModelSpec
from collector.receipts import RolloutReceipt
from learner.group import LearnerGroup, PendingRound
from learner.receipts import ProtocolError, PublishedWeights, StepReceipt
from replay.client import ReplayClient
from replay.shard import remote_shards
from services import report
from services.checkpoint import CheckpointStore, latest_valid
from services.checkpointing import (
    recover_learners,
    restore_learners,
    restore_services,
    save_cut,
)
from services.config import RunConfig
from services.control import Inbox  # gRPC
from services.early_stop import EarlyStopping
from services.spec import model_spec_for
from services.stats import EpisodeWindow, RateMeter, RunCounters

logger = logging.getLogger(__name__)

Hook = Callable[..., None]
EVENTS = ("setup", "rollout", "external", "round", "progress", "checkpoint", "shutdown")


class Controller:
    """Runs one training job on the connected Ray cluster.

    Args:
        config: The validated run configuration.

    Keyword Args:
        model_spec: Q-network spec; read from the env when omitted.
        checkpoint_root: Rotation directory when ``checkpoint.dir`` is not set (None and no
            ``checkpoint.dir``: checkpoints off).
        resume_from: A checkpoint or rotation directory to restore in :meth:`setup`.

    Examples:
        >>> config = load_config(overrides=["controller.total_frames=5000"])
        >>> controller = Controller(config)  # doctest: +SKIP
        >>> summary = controller.run()  # sets up, trains, shuts down  # doctest: +SKIP
    """

    def __init__(
        self,
        config: RunConfig,
        *,
        model_spec: ModelSpec | None = None,
        checkpoint_root: str | Path | None = None,
        resume_from: str | Path | None = None,
    ) -> None:
        self.config = config
        root = config.checkpoint.dir or checkpoint_root
        self.checkpoints = CheckpointStore(root, config.checkpoint.keep) if root else None
        self.resume_from = Path(resume_from) if resume_from else None
        self.last_checkpoint: Path | None = None
        self.next_checkpoint_frames = config.checkpoint.interval_frames or None
        self.model_spec = model_spec or model_spec_for(config)
        self.counters = RunCounters()
        self.episodes = EpisodeWindow(config.controller.episode_window)
        self.hooks: dict[str, list[Hook]] = {event: [] for event in EVENTS}
        self.shards: list = []
        self.replay: ReplayClient | None = None
        self.collectors: CollectorGroup | None = None
        self.learners: LearnerGroup | None = None
        self.weights: PublishedWeights | None = None
        self.inflight: dict[ray.ObjectRef, int] = {}
        self.pending_round: PendingRound | None = None
        self.stop_requested = False
        self.milestones: dict[float, dict] = {}
        self.early_stopping = EarlyStopping.from_config(config.controller)
        self.stop_reason: str | None = None
        self.last_learner_metrics: dict[str, float] = {}
        self.started_at = time.perf_counter()
        self.wall_s = 0.0
        self.rates = RateMeter()
        self.inbox = Inbox()  # gRPC: requests from server threads, served at loop boundaries

    # -- hooks -------------------------------------------------------------------------------
    def register(self, event: str, hook: Hook) -> None:
        """Calls ``hook(controller, *args)`` at a loop boundary.

        Events: ``setup``; ``rollout`` (receipt); ``external`` (an external actor's
        ``ExternalReceipt``, gRPC); ``round`` (step receipt); ``progress``
        (snapshot dict); ``checkpoint`` (path, seconds); ``shutdown``.
        """
        if event not in self.hooks:
            raise ValueError(f"unknown event {event!r}; events: {EVENTS}")
        self.hooks[event].append(hook)

    def emit(self, event: str, *args) -> None:
        """Calls the hooks registered for ``event``."""
        for hook in self.hooks[event]:
            hook(self, *args)

    # -- lifecycle ---------------------------------------------------------------------------
    def setup(self) -> None:
        """Starts replay shards, collectors and the learner group; publishes version 0."""
        cfg = self.config
        name = cfg.run.name
        self.shards = remote_shards(name, cfg.replay, seed=cfg.seed)
        self.replay = ReplayClient(self.shards, seed=cfg.seed)
        self.collectors = CollectorGroup(
            name,
            cfg.collector.num_collectors,
            cfg.collector.env_id,
            cfg.collector.envs_per_collector,
            self.model_spec,
            [f"{name}.replay-{i}" for i in range(cfg.replay.num_shards)],
            cfg.seed,
            num_cpus=cfg.collector.num_cpus,
            max_restarts=cfg.collector.max_restarts,
            vector_mode=cfg.collector.vector_mode,
            env_kwargs=cfg.collector.env_kwargs,
            n_step=cfg.collector.n_step,
            gamma=cfg.collector.gamma,
        )
        self.collectors.wait_ready()
        checkpoint = None
        if self.resume_from is not None:
            checkpoint, _ = latest_valid(self.resume_from)
            restore_services(self, checkpoint)  # replay, collectors, driver counters
            self.counters.generation += 1
        self.learners = self.start_learners()
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
        self.accept_weights(self.learners.publish(), force=True)
        self.collectors.sync_weights(self.weights)
        self.started_at = time.perf_counter()
        self.rates = RateMeter()
        self.emit("setup")

    def start_learners(self) -> LearnerGroup:
        """Starts a learner group of the current generation."""
        cfg = self.config
        return LearnerGroup(
            cfg.run.name,
            cfg.learner,
            self.model_spec,
            self.shards,
            cfg.seed,
            generation=self.counters.generation,
        )

    def checkpoint(self) -> Path | None:
        """Cuts a consistent checkpoint now (None when checkpoints are off)."""
        if self.checkpoints is None:
            return None
        with self.inbox.barrier(self):  # gRPC: external writes held and counted for the cut
            return save_cut(self, self.checkpoints)

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

    def request_stop(self, reason: str = "stop requested") -> None:
        """Asks the loop to stop at the next boundary (signal-safe)."""
        if not self.stop_requested:
            self.stop_reason = reason
        self.stop_requested = True

    def _check_early_stop(self, snapshot: dict) -> None:
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

    # -- the loop ----------------------------------------------------------------------------
    def steps_target(self) -> int:
        """Optimizer steps owed for the frames counted so far (UTD pacing)."""
        ctrl = self.config.controller
        learnable = self.counters.collected_frames - ctrl.init_random_frames
        if learnable <= 0 or self.counters.transitions < self.config.learner.global_batch_size:
            return 0
        return math.floor(ctrl.utd_ratio * learnable)

    def epsilon(self) -> float:
        """Exploration rate for the next rollout (1.0 during ``init_random_frames``)."""
        frames = self.counters.collected_frames
        if frames < self.config.controller.init_random_frames:
            return 1.0
        return self.config.collector.epsilon(frames)

    def _inflight_frames(self) -> int:
        return (
            len(self.inflight)
            * self.config.collector.rollout_frames
            * (self.config.collector.frame_skip)
        )

    def _collection_open(self) -> bool:
        ctrl = self.config.controller
        if self.stop_requested:
            return False
        if self.counters.collected_frames + self._inflight_frames() >= ctrl.total_frames:
            return False
        return self.steps_target() - self.counters.optim_steps <= ctrl.max_lag_steps

    def _issue_rollouts(self) -> None:
        cfg = self.config.collector
        per_collector = [0] * len(self.collectors)
        for index in self.inflight.values():
            per_collector[index] += 1
        for index in range(len(self.collectors)):
            while per_collector[index] < cfg.max_inflight and self._collection_open():
                ref = self.collectors.rollout(
                    index, cfg.rollout_frames, self.epsilon(), self.weights
                )
                self.inflight[ref] = index
                per_collector[index] += 1

    def _maybe_start_round(self) -> None:
        if self.pending_round is not None or self.stop_requested:
            return
        owed = self.steps_target() - self.counters.optim_steps
        if owed > 0:
            steps = min(owed, self.config.controller.max_steps_per_round)
            beta = None
            if self.config.replay.sampler == "prioritized":
                beta = self.config.replay.beta(self.counters.collected_frames)
            self.pending_round = self.learners.start_round(steps, beta=beta)

    def _on_rollout(self, ref: ray.ObjectRef) -> None:
        index = self.inflight.pop(ref)
        try:
            receipt: RolloutReceipt = ray.get(ref)
        except ray.exceptions.RayActorError as err:
            self.counters.collector_failures += 1
            self.collectors.mark_dead(index, ref)  # one death fails several rollouts
            if self.collectors.restarts > self.config.collector.max_restarts * len(self.collectors):
                raise RuntimeError(f"collectors died too often; last: {err}") from err
            logger.warning("collector %d died; its rollout is not counted (%s)", index, err)
            return
        c = self.counters
        c.collected_frames += receipt.frames * self.config.collector.frame_skip
        c.transitions += receipt.frames
        c.rollouts += 1
        c.episodes += len(receipt.episode_returns)
        self.episodes.extend(receipt.episode_returns, receipt.episode_lengths)
        report.update_milestones(self)
        self.emit("rollout", receipt)

    def _on_round(self) -> None:
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
        c = self.counters
        c.optim_steps += receipt.optim_steps
        c.model_version = receipt.model_version
        c.rounds += 1
        if receipt.published is not None:
            self.accept_weights(receipt.published)
        self.last_learner_metrics = receipt.metrics
        self._check_early_stop({"learner": receipt.metrics})
        self.emit("round", receipt)

    def count_external(self, receipt) -> None:
        """Counts an external actor's stored batch (gRPC) exactly like a rollout's frames."""
        c = self.counters
        c.collected_frames += receipt.frames * self.config.collector.frame_skip
        c.transitions += receipt.frames
        c.external_frames += receipt.frames * self.config.collector.frame_skip
        c.episodes += len(receipt.episode_returns)
        self.episodes.extend(receipt.episode_returns, receipt.episode_lengths)
        report.update_milestones(self)
        self.emit("external", receipt)

    def accept_weights(self, weights: PublishedWeights, *, force: bool = False) -> None:
        """Keeps ``weights`` if newer by (generation, version), or always with ``force``."""
        if not force and self.weights is not None and weights.key <= self.weights.key:
            return
        self.weights = weights
        self.counters.published_version = weights.version

    def _round_ready(self) -> bool:
        refs = list(self.pending_round.refs)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        return len(ready) == len(refs)

    def wait_and_process(self, timeout: float) -> bool:
        """Waits for a rollout or the learner round, then counts what finished.

        Returns:
            False when nothing was in flight.
        """
        waitable = list(self.inflight)
        if self.pending_round is not None:
            waitable += list(self.pending_round.refs)
        if not waitable:
            return False
        ray.wait(waitable, num_returns=1, timeout=timeout)
        done, _ = ray.wait(list(self.inflight), num_returns=len(self.inflight), timeout=0)
        for ref in done:
            self._on_rollout(ref)
        if self.pending_round is not None and self._round_ready():
            self._on_round()
        return True

    def _checkpoint_due(self) -> bool:
        due = self.next_checkpoint_frames
        if due is None or self.counters.collected_frames < due or self.stop_requested:
            return False
        interval = self.config.checkpoint.interval_frames
        self.next_checkpoint_frames = (self.counters.collected_frames // interval + 1) * interval
        return True

    def train(self) -> None:
        """Runs the loop until the frame budget and the owed steps are done, or a stop.

        Checkpoints are cut every ``checkpoint.interval_frames``, and at the end when stopped
        or (with ``checkpoint.at_end``) when the budget is reached.
        """
        ctrl = self.config.controller
        next_progress = time.perf_counter() + ctrl.log_interval_s
        while True:
            self.inbox.poll(self)  # gRPC: count external writes, serve checkpoint/stop requests
            if self._checkpoint_due():
                self.checkpoint()
            self._issue_rollouts()
            self._maybe_start_round()
            if not self.wait_and_process(ctrl.log_interval_s) and not self.inbox.wait(
                self, ctrl.log_interval_s
            ):  # gRPC: with external actors, idle until the budget or a stop
                break  # nothing in flight and nothing owed: budget reached or stop requested
            if time.perf_counter() >= next_progress:
                snapshot = self.snapshot()
                self._check_early_stop(snapshot)
                self.emit("progress", snapshot)
                next_progress = time.perf_counter() + ctrl.log_interval_s
        if self.weights is not None:
            self.collectors.sync_weights(self.weights)  # collectors end on the newest version
        self.wall_s = time.perf_counter() - self.started_at
        if self.stop_requested or self.config.checkpoint.at_end:
            self.checkpoint()
        self.emit("progress", self.snapshot())

    # -- reporting ---------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """Counters and rates for progress lines and metrics (see ``services.report``)."""
        return report.snapshot(self)

    def summary(self) -> dict:
        """The run's final figures (the CLI prints them as its last line of JSON)."""
        return report.summary(self)
