"""The deterministic loops (``run.deterministic``): rounds scheduled by counts, never by arrival.

A deterministic run advances in *ticks*. In tick ``t``:

1. every collector runs one rollout of ``collector.rollout_frames`` (while the budget lasts)
   with the exploration of the frames counted so far and the weights published ``k =
   run.policy_lag`` ticks earlier (off-policy; on-policy: the newest, lag 0);
2. meanwhile the learners run the round owed by the update-to-data ratio for the frames counted
   before the tick (off-policy; ``max_steps_per_round`` at most), each rank sampling the shards
   as the last commit left them, from streams named by its rank and model version;
3. once every rollout and the round are back, every shard commits what was staged during the
   tick (``replay.staging``): the priority updates, then the writes in ``(collector, seq)``
   order. The table a round samples is therefore fixed by the tick number alone.

The on-policy loop is the lockstep loop with a commit after collection (its tables must hold
the batch before the round samples it).

A progress snapshot (a ``metrics.jsonl`` line, a progress line) is taken after every tick rather
than every ``controller.log_interval_s``, so two runs' logs compare line by line: the learner's
losses, frames, steps and versions are equal; times and rates are not.

Checkpoints are cut only at ``checkpoint.interval_frames`` counts, between ticks. Every such
boundary, whether a checkpoint is written or not, does what a resume from it would do: every
collector is reloaded from its own state (fresh, re-seeded episodes, open n-step windows
dropped) and the lag queue restarts from the newest weights. So a run stopped at a boundary and
resumed gives the same bits as one that ran straight through.

Faults: a collector that dies, a learner generation that fails or a replay shard that restarts
in a deterministic run cannot be replayed in the same order, so the run stops with a
:class:`DeterminismError` naming what was lost; resuming from the last checkpoint (written at a
boundary) continues deterministically.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from typing import TYPE_CHECKING

import ray

from services.checkpoints.cut import CheckpointWriteError
from services.driver.faults import DeterminismError
from services.driver.loops.offpolicy import OffPolicyLoop
from services.driver.loops.onpolicy import OnPolicyLoop

if TYPE_CHECKING:
    from collector.receipts import RolloutReceipt
    from learner.receipts import PublishedWeights
    from services.driver.views import LoopView

__all__ = ["DeterminismError", "DeterministicOffPolicyLoop", "DeterministicOnPolicyLoop"]

logger = logging.getLogger(__name__)


class DeterministicOffPolicyLoop(OffPolicyLoop):
    """Ticks of one rollout per collector and one learner round, then a commit.

    Args:
        controller: The runtime whose collectors, learners and counters the loop drives.
    """

    def __init__(self, controller: LoopView) -> None:
        super().__init__(controller)
        self.tick = 0
        self.lag: collections.deque[PublishedWeights | None]
        self.lag = collections.deque(maxlen=self.config.run.policy_lag)

    def run(self) -> None:
        """Runs ticks until the frame budget is collected, or a stop."""
        c = self.controller
        self.lag.clear()
        self.lag.append(c.weights)
        while True:
            c.inbox.poll(c)  # stop requests are served between ticks
            if c.stop_requested:
                break
            self.boundary()
            if not self.run_tick():
                break
            c.progress(force=True)  # one snapshot per tick: metrics.jsonl compares line by line

    def run_tick(self) -> bool:
        """One tick; False once the frame budget is collected.

        The steps owed for the last tick's frames are not taken: a run stopped there and
        resumed takes them in its first tick, beside its first collection, as a run that goes
        on does.
        """
        c = self.controller
        before = Losses.of(self)
        issued = self._issue_round()
        if not issued:
            return False
        self._maybe_start_round()
        while c.inflight or c.pending_round is not None:
            c.wait_and_process(self.config.controller.log_interval_s)
        before.check(c, self.tick, issued)
        commit(c)
        self.lag.append(c.weights)
        self.tick += 1
        return True

    def _issue_round(self) -> list[int]:
        c, cfg = self.controller, self.config.collector
        if c.counters.collected_frames >= self.config.controller.total_frames:
            return []
        assert c.collectors is not None  # set up before the loop runs
        explore = c.exploration()
        weights = self.lag[0]
        issued = []
        for index in range(len(c.collectors)):
            ticket = c.collectors.rollout(index, cfg.rollout_frames, explore, weights)
            c.inflight.add(ticket, index)
            issued.append(index)
        return issued

    def boundary(self) -> None:
        """At a checkpoint frame count: the cut, then what a resume from it would do."""
        if boundary(self.controller):
            self.lag.clear()
            self.lag.append(self.controller.weights)

    def state_dict(self) -> dict:
        """The tick count."""
        return {"tick": self.tick}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`."""
        self.tick = int(state.get("tick", 0))


class DeterministicOnPolicyLoop(OnPolicyLoop):
    """The lockstep loop with a commit after collection and restarts at checkpoint counts."""

    def run(self) -> None:
        """Iterates until the frame budget is collected or a stop is requested."""
        c = self.controller
        while True:
            c.inbox.poll(c)
            if (
                c.stop_requested
                or c.counters.collected_frames >= self.config.controller.total_frames
            ):
                break
            boundary(c)
            transitions = self._collect()
            if transitions and self._learn(transitions):
                self.iteration += 1
            c.clear_replay()
            c.progress(force=True)  # one snapshot per tick: metrics.jsonl compares line by line

    def _collect(self) -> int | None:
        c = self.controller
        before = Losses.of(self)
        transitions = super()._collect()
        assert c.collectors is not None  # set up before the loop runs
        before.check(c, self.iteration, list(range(len(c.collectors))))
        commit(c)
        return transitions

    def _learn(self, transitions: int) -> bool:
        before = Losses.of(self)
        learned = super()._learn(transitions)
        before.check(self.controller, self.iteration, [])
        return learned


def boundary(controller: LoopView) -> bool:
    """At a checkpoint frame count, cuts and restarts episodes; returns whether it was one."""
    if not controller.cadence.due(controller.counters.collected_frames):
        return False
    with contextlib.suppress(CheckpointWriteError):  # logged and counted by the controller
        controller.checkpoint()
    restart_episodes(controller)
    return True


def restart_episodes(controller: LoopView) -> None:
    """Reloads every collector from its own state, as a resume from a checkpoint here would."""
    collectors = controller.collectors
    assert collectors is not None  # set up before the loop runs
    collectors.load_state_dicts(collectors.state_dicts())


def commit(controller: LoopView) -> list[dict]:
    """Commits every shard's staged writes and updates (between ticks, nothing in flight)."""
    return ray.get([shard.commit.remote() for shard in controller.shards])


class Losses:
    """Fault counters before a tick, to refuse a tick that lost something (see the module).

    A collector Ray restarted between two ticks fails no rollout, but its next receipt does not
    continue its sequence numbers: that counts as lost too.

    Attributes:
        watch: The loop's :class:`Receipts` (a ``rollout`` hook).
    """

    def __init__(self, counters, watch: Receipts) -> None:
        self.collector_failures = counters.collector_failures
        self.generation = counters.generation
        self.replay_restarts = counters.replay_restarts
        self.watch = watch

    @classmethod
    def of(cls, loop) -> Losses:
        """The loop's controller's fault counters now; notes the collectors counted from now."""
        watch = getattr(loop, "_receipts", None)
        if watch is None:
            watch = loop._receipts = Receipts()
            loop.controller.register("rollout", watch)
        watch.counted.clear()
        return cls(loop.controller.counters, watch)

    def check(self, controller: LoopView, tick: int, issued: list[int]) -> None:
        """Raises :class:`DeterminismError` if a collector, learner or shard was lost."""
        counters = controller.counters
        restarted = self.watch.restarted
        if counters.collector_failures != self.collector_failures or restarted:
            lost = sorted((set(issued) - self.watch.counted) | restarted)
            names = ", ".join(f"collector-{i}" for i in lost) or "a collector"
            raise DeterminismError(
                f"tick {tick}: {names} died; a deterministic run cannot replay its rollout in "
                "the same order. Resume from the last checkpoint to continue deterministically."
            )
        if counters.generation != self.generation:
            raise DeterminismError(
                f"tick {tick}: the learner generation failed; a deterministic run cannot "
                "replay it. Resume from the last checkpoint to continue deterministically."
            )
        if counters.replay_restarts != self.replay_restarts:
            raise DeterminismError(
                f"tick {tick}: a replay shard restarted; a deterministic run cannot replay "
                "its writes. Resume from the last checkpoint to continue deterministically."
            )


class Receipts:
    """A ``rollout`` hook: the collectors counted, and those whose sequence numbers broke."""

    def __init__(self) -> None:
        self.counted: set[int] = set()
        self.restarted: set[int] = set()
        self.seqs: dict[int, int] = {}

    def __call__(self, controller: object, receipt: RolloutReceipt) -> None:
        """Notes a counted receipt."""
        index = receipt.collector_id
        self.counted.add(index)
        last = self.seqs.get(index)
        if last is not None and receipt.seq != last + 1:
            self.restarted.add(index)
        self.seqs[index] = receipt.seq
