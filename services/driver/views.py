"""Typed views of a run: what each part outside the controller reads of it, and nothing more.

The :class:`~services.driver.controller.Controller` satisfies every view structurally; a part
annotates its parameter with its view instead of taking the whole controller, so a reader sees
at the signature what it may touch, a type checker (``mypy``, ``[tool.mypy]`` in
``pyproject.toml``) refuses a read the view does not name, and a test can hand it something
smaller:

    * :class:`Hooked`: registers hooks (``services.driver.hooks``).
    * :class:`MetricsHost`, :class:`Counted`: the Prometheus exporter attaches to the run's
      hooks and its frame skip, then its hooks read the counters alone
      (``services.observe.metrics``).
    * :class:`ReportView`: progress snapshots and the summary (``services.observe.report``).
    * :class:`LoopView`: the loops (``services.driver.loops``).
    * :class:`DrainView`: counting what is in flight (``services.checkpoints.cut.drain``).
    * :class:`CutView`: consistent cuts, ordered restores and learner recovery
      (``services.checkpoints.cut``).
    * :class:`ElasticView`, :class:`AutoscaleView`: live resizes and the fleet that follows
      the cluster (``services.driver.elastic``, ``services.driver.autoscale``).
    * :class:`RecoveryView`: fault handling (``services.driver.recovery``).
    * :class:`BarrierView`, :class:`InboxView`: the gRPC inbox (``services.driver.inbox``) and
      the server it serves (``services.grpc.server``).
    * :class:`EvaluationHost`: the evaluation runner (``services.evaluation.evaluator``).
    * :class:`StopView`: signal handlers (``services.train``, ``services.run.trainer``).

Where a view hands out one of the run's parts (its inbox, recovery, resizes, evaluation), it
names that part's port (``services.driver.ports``), not its class: this module imports no class
of the parts that read it. Frame accounting (:class:`~services.driver.accounting.Accounting`),
the checkpoint cadence (:class:`~services.driver.cadence.CheckpointCadence`) and the rollouts in
flight (:class:`~services.driver.inflight.InFlight`) are plain objects the views hand out
whole: they hold no references to actors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pathlib import Path

    from collector.manage.group import CollectorGroup
    from collector.networks import NetworkSpec
    from learner.ranks.group import LearnerGroup, PendingRound
    from learner.receipts import PublishedWeights
    from replay.client import ReplayClient
    from replay.wire.batches import ExternalReceipt
    from services.checkpoints.store import CheckpointStore
    from services.config import RunConfig
    from services.config.recipes import Algorithm
    from services.driver.accounting import Accounting
    from services.driver.cadence import CheckpointCadence
    from services.driver.hooks import Hook
    from services.driver.inflight import InFlight
    from services.driver.ports import (
        Barrier,
        ElasticPort,
        EvaluationPort,
        InboxPort,
        RecoveryPort,
        ShardedBarrier,
        ShardRestarts,
    )
    from services.driver.stats import RateMeter, RunCounters


@runtime_checkable
class Loop(Protocol):
    """A driver loop (``services.driver.loops``): its state travels in the checkpoint."""

    config: RunConfig  # the run's config (a live resize hands it a new one)

    def run(self) -> None:
        """Runs until the frame budget or a stop."""

    def state_dict(self) -> dict:
        """The loop's counters for the driver's checkpoint (and snapshots)."""

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`."""


@runtime_checkable
class Hooked(Protocol):
    """A run that calls hooks at its loop boundaries."""

    def register(self, event: str, hook: Hook) -> None:
        """Calls ``hook(run, *args)`` at each ``event`` (``services.driver.hooks``)."""


@runtime_checkable
class Counted(Protocol):
    """A run's counters (what its Prometheus hooks read)."""

    @property
    def counters(self) -> RunCounters:
        """Frames, steps, episodes and fault counts."""


@runtime_checkable
class StopView(Protocol):
    """What a signal handler reads and asks: stop at the next boundary, or exit at once."""

    stop_requested: bool

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stops the run at the next boundary."""


@runtime_checkable
class MetricsHost(Hooked, Protocol):
    """A run the Prometheus exporter attaches to (its hooks then read :class:`Counted`).

    At ``setup`` the exporter reads the collectors' nodes (its per-node series).
    """

    config: RunConfig
    collectors: CollectorGroup | None


@runtime_checkable
class ReportView(Protocol):
    """What progress snapshots and the final summary read."""

    config: RunConfig
    run_id: str
    lineage: list[str]
    accounting: Accounting
    rates: RateMeter
    wall_s: float
    stop_requested: bool
    stop_reason: str | None
    last_learner_metrics: dict[str, float]
    replay: ReplayClient | None
    shards: list
    learners: LearnerGroup | None
    loop: Loop
    evaluation: EvaluationPort | None

    @property
    def elastic(self) -> ElasticPort:
        """The run's current and target sizes."""

    def exploration(self) -> dict[str, Any]:
        """Exploration parameters of the next rollout."""


@runtime_checkable
class DrainView(Protocol):
    """What counting every rollout in flight and the learner round reads."""

    config: RunConfig
    inflight: InFlight
    pending_round: PendingRound | None

    def wait_and_process(self, timeout: float) -> bool:
        """Counts whatever rollout or learner round finishes within ``timeout``."""


@runtime_checkable
class BarrierView(Protocol):
    """What the inbox reads to count held external writes and to refresh its status."""

    config: RunConfig
    last_checkpoint: Path | None
    stop_reason: str | None

    @property
    def counters(self) -> RunCounters:
        """The counters ``GetStatus`` reports."""

    def count_external(self, receipt: ExternalReceipt) -> None:
        """Counts an external actor's stored batch."""

    def exploration(self) -> dict[str, Any]:
        """Exploration parameters for the next rollout (``epsilon`` for external actors)."""


@runtime_checkable
class InboxView(Hooked, BarrierView, Protocol):
    """What the gRPC inbox reads, counts through and asks of the run."""

    algorithm: Algorithm
    shards: list
    weights: PublishedWeights | None
    stop_requested: bool

    @property
    def elastic(self) -> ElasticPort:
        """Control/Scale requests."""

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stops the run at the next boundary."""

    def checkpoint(self) -> Path | None:
        """Cuts a consistent checkpoint now."""

    def steps_target(self) -> int:
        """Optimizer steps owed by UTD pacing."""


@runtime_checkable
class LoopView(InboxView, DrainView, Hooked, Protocol):
    """What a loop reads and drives (it hands the run to the inbox, so it is an InboxView)."""

    collectors: CollectorGroup | None
    learners: LearnerGroup | None
    replay: ReplayClient | None  # the shards' write counts (the asynchronous loop's check)
    cadence: CheckpointCadence
    last_learner_metrics: dict[str, float]

    @property
    def inbox(self) -> InboxPort[InboxView]:
        """External writes counted, gRPC requests served at the loop's boundaries."""

    def maybe_checkpoint(self) -> Path | None:
        """Cuts a checkpoint when one is due."""

    def progress(self, *, force: bool = False) -> None:
        """Emits a progress snapshot when one is due (or ``force``)."""

    def clear_replay(self) -> int:
        """Empties every replay shard (on-policy iteration boundary)."""


@runtime_checkable
class CutView(DrainView, BarrierView, Protocol):
    """What a consistent cut, an ordered restore and learner recovery read and set."""

    run_id: str
    lineage: list[str]
    accounting: Accounting
    cadence: CheckpointCadence
    loop: Loop
    evaluation: EvaluationPort | None
    replay: ReplayClient | None
    collectors: CollectorGroup | None
    learners: LearnerGroup | None
    checkpoints: CheckpointStore | None

    @property
    def recovery(self) -> RecoveryPort:
        """Replay shards answer before a cut (a restarted one refilled first)."""

    @property
    def inbox(self) -> Barrier[BarrierView]:
        """External writes held and counted around the cut."""

    def start_learners(self, generation: int | None = None) -> LearnerGroup:
        """Starts a learner group of ``generation`` (default: the current one)."""

    def accept_weights(self, weights: PublishedWeights, *, force: bool = False) -> None:
        """Keeps ``weights`` if newer (always with ``force``)."""

    def emit(self, event: str, *args: Any) -> None:
        """Calls the hooks of ``event``."""


@runtime_checkable
class ElasticView(DrainView, BarrierView, Protocol):
    """What live resizes read, replace and ask of the run."""

    run_id: str
    algorithm: Algorithm
    shards: list
    replay: ReplayClient | None
    collectors: CollectorGroup | None
    learners: LearnerGroup | None
    weights: PublishedWeights | None

    @property
    def recovery(self) -> RecoveryPort:
        """Watches the new replay shards."""

    @property
    def inbox(self) -> ShardedBarrier[BarrierView]:
        """External writes held around a shard resize, then sent to the new shards."""

    def use_config(self, config: RunConfig) -> None:
        """Runs on ``config`` from now on."""

    def start_learners(self, generation: int | None = None) -> LearnerGroup:
        """Starts a learner group of the current generation."""

    def accept_weights(self, weights: PublishedWeights, *, force: bool = False) -> None:
        """Keeps ``weights`` if newer (always with ``force``)."""

    def emit(self, event: str, *args: Any) -> None:
        """Calls the hooks of ``event`` (``resize``)."""


@runtime_checkable
class AutoscaleView(Protocol):
    """What an ``auto`` fleet reads of the run and sets (``collector.num_collectors: auto``)."""

    config: RunConfig
    collectors: CollectorGroup | None
    inflight: InFlight

    @property
    def elastic(self) -> ElasticPort:
        """Resizes to what the cluster offers."""

    def use_config(self, config: RunConfig) -> None:
        """Runs on ``config`` from now on."""


@runtime_checkable
class RecoveryView(Protocol):
    """What fault handling reads (and counts)."""

    config: RunConfig
    collectors: CollectorGroup | None
    inflight: InFlight
    replay: ReplayClient | None
    shards: list
    last_checkpoint: Path | None

    @property
    def inbox(self) -> ShardRestarts:
        """A restarted replay shard's direct Insert server serves again."""

    @property
    def counters(self) -> RunCounters:
        """Fault counts (collector failures, env errors, replay restarts and losses)."""


@runtime_checkable
class EvaluationHost(Hooked, Protocol):
    """What the evaluation runner reads of the run and asks of it."""

    run_id: str
    model_spec: NetworkSpec
    weights: PublishedWeights | None
    evaluation: EvaluationPort | None

    @property
    def counters(self) -> RunCounters:
        """Frames counted and the published version."""

    def progress(self, *, force: bool = False) -> None:
        """Emits a progress snapshot."""

    def check_early_stop(self, snapshot: dict) -> None:
        """Feeds early stopping a snapshot's metric."""

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stops the run at the next boundary."""
