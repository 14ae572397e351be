"""The lockstep on-policy loop (PPO, A2C, REINFORCE): policy lag 0 by construction.

One iteration:

1. every collector runs one rollout with the newest published version (``rollout_frames``
   transitions, or one complete episode per env for REINFORCE) into the FIFO tables;
2. the learners run one round of ``num_epochs x num_minibatches`` optimizer steps on exactly
   that batch (each rank takes ``batch / world_size`` items and trains every epoch on a fresh
   shuffle of them; a recurrent policy's items are whole sequences, ``collector.sequences``),
   and rank 0 publishes;
3. the tables are cleared, and the next iteration collects with the new version.

The learners report the largest ``version - policy_version`` of the items they trained on; it
must be 0 (anything else is a protocol breach and stops the run). A checkpoint is cut between
iterations, when nothing is in flight and the tables are empty, so a resumed run continues with
the next iteration, its iteration count and the learners' LR schedule intact. A collector lost
mid-iteration (restarted by Ray) voids that iteration's batch: the tables are cleared and the
iteration is collected again; frames already counted stay counted. External actors (gRPC)
cannot take part in lockstep: an on-policy run serves gRPC status, checkpoint and stop, and
refuses inserted experience.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from learner.ranks.sampling import EpochPlan
from learner.receipts import ProtocolError
from services.config.recipes import algorithm_for

if TYPE_CHECKING:
    from services.driver.views import LoopView

logger = logging.getLogger(__name__)


class OnPolicyLoop:
    """Collect, train, publish, repeat.

    Args:
        controller: The runtime whose collectors, learners and counters the loop drives.
    """

    def __init__(self, controller: LoopView) -> None:
        self.controller = controller
        self.config = controller.config
        self.iteration = 0
        algorithm = algorithm_for(self.config)
        # A recurrent policy's items are sequences (collector.sequences): of a fixed length
        # over fixed-length rollouts; over complete episodes, as many as their lengths need,
        # counted from the rollouts' write receipts.
        self.sequence_length = algorithm.sequence_length(self.config)
        self.counts_items = bool(self.sequence_length) and algorithm.transform == "episodes"
        self.items_written = 0
        self._hooked = False

    def _collect(self) -> int | None:
        """One rollout per collector; returns the transitions stored, None if one was lost."""
        c, cfg = self.controller, self.config.collector
        assert c.collectors is not None  # set up before the loop runs
        if self.counts_items and not self._hooked:  # the hooks exist once the controller is
            c.register("rollout", self._on_rollout)
            self._hooked = True
        self.items_written = 0
        exploration = c.exploration()
        for index in c.elastic.collecting():
            ticket = c.collectors.rollout(index, cfg.rollout_frames, exploration, c.weights)
            c.inflight.add(ticket, index)
        before = c.counters.transitions
        failures = c.counters.collector_failures
        while c.inflight:
            c.wait_and_process(self.config.controller.log_interval_s)
        if c.counters.collector_failures != failures:
            return None
        return c.counters.transitions - before

    def _on_rollout(self, _run, receipt) -> None:
        self.items_written += sum(write.num_items for write in receipt.writes)

    def _plan(self, transitions: int) -> EpochPlan:
        options = self.config.learner.onpolicy
        if self.counts_items:
            items = self.items_written
        else:
            items = transitions // (self.sequence_length or 1)
        items //= self.config.learner.world_size
        return EpochPlan(items, options.num_epochs, options.num_minibatches)

    def _learn(self, transitions: int) -> bool:
        """One learner round on the batch; False if the generation failed and was restored."""
        c = self.controller
        assert c.learners is not None  # set up before the loop runs
        plan = self._plan(transitions)
        generation = c.counters.generation
        c.pending_round = c.learners.start_round(plan.steps, epochs=plan)
        while c.pending_round is not None:
            c.wait_and_process(self.config.controller.log_interval_s)
        if c.counters.generation != generation:
            return False
        lag = c.last_learner_metrics.get("policy_lag_max", 0.0)
        if lag != 0:
            raise ProtocolError(
                f"iteration {self.iteration}: learners trained on transitions {lag:g} versions "
                "old; the lockstep loop must train on the current version only"
            )
        return True

    def run(self) -> None:
        """Iterates until the frame budget is collected or a stop is requested."""
        c = self.controller
        ctrl = self.config.controller
        while True:
            c.inbox.poll(c)  # gRPC checkpoint, stop and scale requests, between iterations
            c.elastic.step()  # collectors joining or leaving (services.driver.elastic)
            if c.stop_requested or c.counters.collected_frames >= ctrl.total_frames:
                break
            c.maybe_checkpoint()
            transitions = self._collect()
            if transitions is None:
                logger.warning(
                    "iteration %d: a collector died; collecting it again", self.iteration
                )
                c.clear_replay()
                continue
            if transitions and self._learn(transitions):
                self.iteration += 1
            c.clear_replay()
            c.progress()

    def state_dict(self) -> dict:
        """The iteration count."""
        return {"iteration": self.iteration}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`."""
        self.iteration = int(state.get("iteration", 0))
