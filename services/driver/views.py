"""Typed views of a run: what each part outside the controller reads of it, and nothing more.

The :class:`~services.driver.controller.Controller` satisfies every view structurally; a part
annotates its parameter with its view instead of taking the whole controller, so a reader sees
at the signature what it may touch (and a test can hand it something smaller):

    * :class:`Hooked`: registers hooks (``services.driver.hooks``).
    * :class:`MetricsHost`, :class:`Counted`: the Prometheus exporter attaches to the run's
      hooks and its frame skip, then its hooks read the counters alone
      (``services.observe.metrics``).
    * :class:`ReportView`: progress snapshots and the summary (``services.observe.report``).
    * :class:`CutView`: consistent cuts, ordered restores and learner recovery
      (``services.checkpoints.cut``).
    * :class:`RecoveryView`: fault handling (``services.driver.recovery``).
    * :class:`InboxView`: the gRPC inbox (``services.driver.inbox``) and the server it serves
      (``services.grpc.server``, which also reads :class:`ServedRun`'s ``inbox``).
    * :class:`EvaluationHost`: the evaluation runner (``services.evaluation.evaluator``).

Frame accounting (:class:`~services.driver.accounting.Accounting`) and the checkpoint cadence
(:class:`~services.driver.cadence.CheckpointCadence`) are plain objects the views hand out
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
    from services.driver.inbox import Inbox
    from services.driver.inflight import InFlight
    from services.driver.stats import RateMeter, RunCounters
    from services.evaluation.evaluator import EvaluationRunner


@runtime_checkable
class Loop(Protocol):
    """A driver loop (``services.driver.loops``): its state travels in the checkpoint."""

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
    evaluation: EvaluationRunner | None
    elastic: Any  # services.driver.elastic.Elastic: the run's current and target sizes

    def exploration(self) -> dict[str, Any]:
        """Exploration parameters of the next rollout."""


@runtime_checkable
class CutView(Protocol):
    """What a consistent cut, an ordered restore and learner recovery read and set."""

    config: RunConfig
    run_id: str
    lineage: list[str]
    accounting: Accounting
    cadence: CheckpointCadence
    loop: Loop
    evaluation: EvaluationRunner | None
    replay: ReplayClient | None
    collectors: CollectorGroup | None
    learners: LearnerGroup | None
    inflight: InFlight
    pending_round: PendingRound | None
    last_checkpoint: Path | None
    checkpoints: CheckpointStore | None

    @property
    def counters(self) -> RunCounters:
        """Frames, steps, versions, generation."""

    def wait_and_process(self, timeout: float) -> bool:
        """Counts whatever rollout or learner round finishes within ``timeout``."""

    def start_learners(self, generation: int | None = None) -> LearnerGroup:
        """Starts a learner group of ``generation`` (default: the current one)."""

    def accept_weights(self, weights: PublishedWeights, *, force: bool = False) -> None:
        """Keeps ``weights`` if newer (always with ``force``)."""

    def emit(self, event: str, *args: Any) -> None:
        """Calls the hooks of ``event``."""


@runtime_checkable
class RecoveryView(Protocol):
    """What fault handling reads (and counts)."""

    config: RunConfig
    collectors: CollectorGroup | None
    inflight: InFlight
    replay: ReplayClient | None
    shards: list
    last_checkpoint: Path | None
    inbox: Inbox

    @property
    def counters(self) -> RunCounters:
        """Fault counts (collector failures, env errors, replay restarts and losses)."""


@runtime_checkable
class InboxView(Hooked, Protocol):
    """What the gRPC inbox reads, counts through and asks of the run."""

    config: RunConfig
    algorithm: Algorithm
    shards: list
    weights: PublishedWeights | None
    last_checkpoint: Path | None
    stop_requested: bool
    stop_reason: str | None
    elastic: Any  # services.driver.elastic.Elastic: Control/Scale requests

    @property
    def counters(self) -> RunCounters:
        """The counters ``GetStatus`` reports."""

    def count_external(self, receipt: ExternalReceipt) -> None:
        """Counts an external actor's stored batch."""

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stops the run at the next boundary."""

    def checkpoint(self) -> Path | None:
        """Cuts a consistent checkpoint now."""

    def steps_target(self) -> int:
        """Optimizer steps owed by UTD pacing."""

    def exploration(self) -> dict[str, Any]:
        """Exploration parameters for the next rollout (``epsilon`` for external actors)."""


@runtime_checkable
class ServedRun(InboxView, Protocol):
    """A run the gRPC server serves: its inbox, and what the inbox reads."""

    inbox: Inbox


@runtime_checkable
class EvaluationHost(Hooked, Protocol):
    """What the evaluation runner reads of the run and asks of it."""

    run_id: str
    model_spec: NetworkSpec
    weights: PublishedWeights | None
    evaluation: EvaluationRunner | None

    @property
    def counters(self) -> RunCounters:
        """Frames counted and the published version."""

    def progress(self, *, force: bool = False) -> None:
        """Emits a progress snapshot."""

    def check_early_stop(self, snapshot: dict) -> None:
        """Feeds early stopping a snapshot's metric."""

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stops the run at the next boundary."""
