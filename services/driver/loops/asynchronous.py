"""The asynchronous on-policy loop (IMPALA, APPO): collectors never wait for a learner phase.

Collection and learning overlap as in IMPALA (Espeholt et al., 2018) and Sample Factory:

1. every collector keeps ``collector.max_inflight`` rollouts going, each acted by the newest
   weights it has (trajectory chunks, ``collector.chunks``), while the frames counted plus
   those in flight are below ``total_frames``, and while the *learner queue* (the FIFO tables
   as queues, ``replay.fifo_queue``: chunks written and not yet taken) plus the chunks in
   flight stay below ``learner.vtrace.queue_batches`` global batches: collection is
   rate-limited by the queue, never silently unbounded;
2. whenever the queue holds a global batch (``learner.global_batch_size`` chunks), one learner
   round takes it (each rank its share, oldest first), trains ``learner.vtrace.num_epochs``
   passes of ``num_minibatches`` and publishes; collectors pick the new version up with their
   next rollout. A queue that holds several batches is taken in one round of up to
   ``learner.vtrace.max_round_batches`` of them (minibatches of the same size, one publication),
   so a learner that fell behind catches up without a driver round trip per batch;
3. chunks acted by a version more than ``learner.max_policy_lag`` behind the learner are
   dropped by the ranks (masked out, counted: ``frames_dropped``); the rest are trained on
   with V-trace's correction (``learner.vtrace``).

Frames are counted from rollout receipts only, as in every loop; the loop also keeps what the
rounds report (chunks taken and dropped, frames trained and dropped, policy lag), so at the end
of a run ``collected = trained + dropped + queued`` is checked (the queued chunks' frames are
what is left). Its counters travel in the driver's checkpoint; the queue itself is in the
replay shards' (a checkpoint cut pauses collection and saves the tables, untaken chunks
included, so a resumed run trains on them).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from learner.ranks.sampling import EpochPlan
from learner.receipts import ProtocolError
from services.driver.loops.offpolicy import issue_rollouts

if TYPE_CHECKING:
    from services.driver.views import LoopView

logger = logging.getLogger(__name__)

# What the loop sums from the rounds' receipts (keys of the ranks' summed metrics).
ROUND_SUMS = ("items_dropped", "frames_trained", "frames_dropped", "lag_sum")


def full_queue_lag(config) -> int:
    """The policy lag a chunk reaches when the learner is the bottleneck and the queue is full.

    Such a chunk waits for the ``queue_batches`` batches ahead of it, and the weights it was
    acted with were already up to one round old (a round takes up to ``max_round_batches``
    batches): ``(queue_batches + max_round_batches) x`` the optimizer steps of a batch. A
    ``learner.max_policy_lag`` below it drops chunks whenever the learner falls behind (the loop
    logs a warning at start; every shipped config stays above it).

    Examples:
        >>> from services.config import load_config
        >>> full_queue_lag(load_config("deploy/configs/cartpole_appo.yaml"))
        10
    """
    options = config.learner.vtrace
    batches = options.queue_batches + options.max_round_batches
    return batches * options.num_epochs * options.num_minibatches


class AsyncOnPolicyLoop:
    """Continuous collection into a bounded learner queue; learner rounds as batches arrive.

    Args:
        controller: The runtime whose collectors, learners and counters the loop drives.
    """

    def __init__(self, controller: LoopView) -> None:
        self.controller = controller
        self.config = controller.config
        self.items_taken = 0  # chunks handed to learner rounds (trained or dropped)
        self.items_reported = 0  # chunks of the rounds whose receipts came back
        self.round_items = 0  # chunks of the round in flight
        self.totals = dict.fromkeys(ROUND_SUMS, 0.0)
        self.lag_max = 0.0
        self.rounds_started = 0
        self.rounds_reported = 0  # fewer than started: a round was lost with its generation
        self.lag_counts: list[int] = []  # chunks taken per policy lag (the last bin: dropped)
        self.busy_s = 0.0  # collectors' seconds of rollout work since this loop started
        self.started_at: float | None = None
        self._hooked = False
        lag = full_queue_lag(self.config)
        if self.config.learner.max_policy_lag < lag:
            logger.warning(
                "learner.max_policy_lag %d < %d, the lag of a chunk behind a full queue "
                "(learner.vtrace.queue_batches + max_round_batches batches of %d optimizer "
                "steps): when the learner falls behind, chunks are dropped as stale",
                self.config.learner.max_policy_lag,
                lag,
                self.config.learner.vtrace.num_epochs * self.config.learner.vtrace.num_minibatches,
            )

    # -- the queue ---------------------------------------------------------------------------
    @property
    def batch(self) -> int:
        """Chunks per learner round (``learner.global_batch_size``)."""
        return self.config.learner.global_batch_size

    def queued(self) -> int:
        """Chunks written and not yet handed to a round (each rollout writes one per env)."""
        written = self.controller.counters.rollouts * self.config.collector.envs_per_collector
        return written - self.items_taken

    def _inflight_items(self) -> int:
        return len(self.controller.inflight) * self.config.collector.envs_per_collector

    def _collection_open(self) -> bool:
        c, cfg = self.controller, self.config
        if c.stop_requested:
            return False
        frames_inflight = len(c.inflight) * cfg.collector.rollout_frames * cfg.collector.frame_skip
        if c.counters.collected_frames + frames_inflight >= cfg.controller.total_frames:
            return False
        bound = cfg.learner.vtrace.queue_batches * self.batch
        return self.queued() + self._inflight_items() < bound

    # -- issuing -----------------------------------------------------------------------------
    def _issue_rollouts(self) -> None:
        issue_rollouts(self.controller, self._collection_open)

    def plan(self, batches: int = 1) -> EpochPlan:
        """One round of ``batches`` global batches: each rank's share, its passes, the lag limit.

        The minibatches keep their size: a round of ``k`` batches has ``k x num_minibatches``
        per pass.
        """
        learner = self.config.learner
        options = learner.vtrace
        return EpochPlan(
            batches * self.batch // learner.world_size,
            options.num_epochs,
            batches * options.num_minibatches,
            max_policy_lag=learner.max_policy_lag,
        )

    def round_batches(self) -> int:
        """Global batches the next round takes: what is queued, up to ``max_round_batches``."""
        return min(self.queued() // self.batch, self.config.learner.vtrace.max_round_batches)

    def _maybe_start_round(self) -> None:
        c = self.controller
        if c.pending_round is not None or c.stop_requested:
            return
        batches = self.round_batches()
        if batches < 1:
            return
        assert c.learners is not None  # set up before the loop runs
        plan = self.plan(batches)
        c.pending_round = c.learners.start_round(plan.steps, epochs=plan)
        self.round_items = batches * self.batch
        self.items_taken += self.round_items
        self.rounds_started += 1

    def _on_round(self, controller, receipt) -> None:
        """The ``round`` hook: adds what a finished round's ranks reported."""
        self.rounds_reported += 1
        self.items_reported += self.round_items
        self.round_items = 0
        for key in ROUND_SUMS:
            self.totals[key] += receipt.metrics.get(key, 0.0)
        self.lag_max = max(self.lag_max, receipt.metrics.get("policy_lag_max", 0.0))
        if len(self.lag_counts) < len(receipt.lags):
            self.lag_counts += [0] * (len(receipt.lags) - len(self.lag_counts))
        for lag, count in enumerate(receipt.lags):
            self.lag_counts[lag] += count

    def _on_rollout(self, controller, receipt) -> None:
        self.busy_s += receipt.work_s or receipt.rollout_s

    def collector_wait_fraction(self) -> float:
        """Share of the collectors' wall time since the loop started with no rollout to run.

        A collector works on a rollout (``RolloutReceipt.work_s``: weights applied, envs
        stepped, the write sent) or waits for the next one: for the driver's permission to
        collect (the learner queue is full) or for weights.
        """
        if self.started_at is None:
            return 0.0
        wall = (time.perf_counter() - self.started_at) * max(self.config.collector.fleet_size, 1)
        return max(0.0, 1.0 - self.busy_s / wall) if wall > 0 else 0.0

    def lag_percentile(self, q: float) -> float:
        """The ``q``-quantile (0-1) of the taken chunks' policy lags (0 before any round)."""
        total = sum(self.lag_counts)
        if not total:
            return 0.0
        cumulative = 0
        for lag, count in enumerate(self.lag_counts):
            cumulative += count
            if cumulative >= q * total:
                return float(lag)
        return float(len(self.lag_counts) - 1)

    def run(self) -> None:
        """Runs until the frame budget is collected and the queue's whole batches trained."""
        c = self.controller
        if not self._hooked:  # the hooks exist once the controller is built
            c.register("round", self._on_round)
            c.register("rollout", self._on_rollout)
            self._hooked = True
        self.started_at, self.busy_s = time.perf_counter(), 0.0
        interval = self.config.controller.log_interval_s
        next_progress = time.perf_counter() + interval
        while True:
            c.inbox.poll(c)  # gRPC checkpoint, stop and scale requests
            c.elastic.step()  # collectors joining or leaving (services.driver.elastic)
            c.maybe_checkpoint()
            # A round first: the batch it takes frees the queue's room before collection is
            # issued, so the collectors fill the next batch while this one trains (issued the
            # other way round, a one-batch queue left them idle for the whole round).
            self._maybe_start_round()
            self._issue_rollouts()
            if not c.wait_and_process(interval) and not c.inbox.wait(c, interval):
                break  # nothing in flight or owed: budget reached or stop requested
            if time.perf_counter() >= next_progress:
                c.progress()
                next_progress = time.perf_counter() + interval
        self.check_frames()

    # -- accounting --------------------------------------------------------------------------
    def items_lost(self) -> int:
        """Chunks taken by rounds lost with their learner generation (a rank died mid-round).

        Their frames stay counted (from the rollouts' receipts) and were never trained; a rank
        that died before taking its share leaves those chunks in the tables instead, where the
        next rounds take them. Both are bounded by the lost rounds' batches, which
        :meth:`check_frames` allows for.
        """
        return self.items_taken - self.items_reported

    def frames_queued(self) -> int:
        """Collected frames neither trained nor dropped (the untaken chunks' valid steps)."""
        counted = self.controller.counters.transitions
        return int(counted - self.totals["frames_trained"] - self.totals["frames_dropped"])

    def check_frames(self) -> None:
        """``collected = trained + dropped + queued (+ lost)``, the rest in the untaken chunks.

        Raises:
            ProtocolError: If the rounds trained or dropped frames that were never counted, or
                the frames left exceed what the untaken chunks (and those of lost rounds,
                :meth:`items_lost`) can hold.
        """
        replay = self.controller.replay
        written = sum(s["write_count"] for s in replay.stats()) if replay is not None else None
        counted = self.controller.counters.rollouts * self.config.collector.envs_per_collector
        if written is not None and written != counted:
            # A collector died between its write and its receipt: the queue holds chunks no
            # receipt counted (their frames are not counted, as in every loop).
            logger.warning("%d chunks written, %d counted: frames not checked", written, counted)
            return
        left, queued, lost = self.frames_queued(), self.queued(), self.items_lost()
        steps = self.config.collector.rollout_frames // self.config.collector.envs_per_collector
        room = queued + lost
        if left < 0 or left > room * max(1, steps) or (room == 0 and left != 0):
            raise ProtocolError(
                f"frames: {self.controller.counters.transitions} counted, "
                f"{self.totals['frames_trained']:g} trained and "
                f"{self.totals['frames_dropped']:g} dropped leave {left} for {queued} queued "
                f"chunks and {lost} of lost rounds"
            )

    def state_dict(self) -> dict:
        """The queue's accounting (chunks taken, frames trained and dropped, the lags).

        ``queued_chunks``, ``items_lost``, ``collector_wait_fraction`` and the lag percentiles
        are reported, not restored.
        """
        return {
            "items_taken": self.items_taken,
            "items_reported": self.items_reported,
            "rounds_started": self.rounds_started,
            "rounds_reported": self.rounds_reported,
            **self.totals,
            "lag_max": self.lag_max,
            "lag_counts": list(self.lag_counts),
            "policy_lag_p50": self.lag_percentile(0.5),
            "policy_lag_p99": self.lag_percentile(0.99),
            "queued_chunks": self.queued(),
            "items_lost": self.items_lost(),
            "collector_wait_fraction": round(self.collector_wait_fraction(), 4),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`."""
        self.items_taken = int(state.get("items_taken", 0))
        for key in ROUND_SUMS:
            self.totals[key] = float(state.get(key, 0.0))
        self.lag_max = float(state.get("lag_max", 0.0))
        self.rounds_started = int(state.get("rounds_started", 0))
        self.rounds_reported = int(state.get("rounds_reported", 0))
        # Checkpoints from before multi-batch rounds: every round took one batch.
        self.items_reported = int(state.get("items_reported", self.rounds_reported * self.batch))
        self.round_items = 0
        self.lag_counts = [int(n) for n in state.get("lag_counts", [])]
