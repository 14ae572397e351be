"""The asynchronous off-policy loop (DQN, SAC): collection and learning overlap.

1. keep each collector busy with up to ``collector.max_inflight`` rollouts while the frames
   counted plus the frames in flight are below ``total_frames`` (so the budget is overshot by
   less than one rollout) and the learners are not trailing by more than ``max_lag_steps``;
2. once ``init_random_frames`` are in and replay holds a global batch, keep one learner round
   in flight so that optimizer steps track ``utd_ratio * (frames - init_random_frames)``;
3. stop at ``total_frames`` (after the owed learner steps) or on a stop request.

Receipts are counted by the controller (``Controller.wait_and_process``); frames written by
external actors over gRPC are counted at each boundary (``Controller.inbox``), and a run fed
by external actors alone waits for them until the budget or a stop.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from services.driver.views import LoopView


def issue_rollouts(controller: LoopView, collection_open: Callable[[], bool]) -> None:
    """Fills the free collector slots while ``collection_open()``; not a scan of the fleet.

    Only the slots freed since the last call are visited. Shared by the loops that keep their
    collectors busy (off-policy, asynchronous on-policy).
    """
    c, cfg = controller, controller.config.collector
    assert c.collectors is not None  # set up before the loop runs
    explore = None
    while (index := c.inflight.next_free()) is not None:
        if not collection_open():
            c.inflight.release(index)
            return
        if explore is None:
            explore = c.exploration()
        ticket = c.collectors.rollout(index, cfg.rollout_frames, explore, c.weights)
        c.inflight.add(ticket, index)


class OffPolicyLoop:
    """Update-to-data pacing over asynchronous collectors.

    Args:
        controller: The runtime whose collectors, learners and counters the loop drives.
    """

    def __init__(self, controller: LoopView) -> None:
        self.controller = controller
        self.config = controller.config

    def steps_target(self) -> int:
        """Optimizer steps owed for the frames counted so far (UTD pacing)."""
        ctrl = self.config.controller
        counters = self.controller.counters
        learnable = counters.collected_frames - ctrl.init_random_frames
        if learnable <= 0 or counters.transitions < self.config.learner.global_batch_size:
            return 0
        return math.floor(ctrl.utd_ratio * learnable)

    def _inflight_frames(self) -> int:
        cfg = self.config.collector
        return len(self.controller.inflight) * cfg.rollout_frames * cfg.frame_skip

    def _collection_open(self) -> bool:
        ctrl, c = self.config.controller, self.controller
        if c.stop_requested:
            return False
        if c.counters.collected_frames + self._inflight_frames() >= ctrl.total_frames:
            return False
        return self.steps_target() - c.counters.optim_steps <= ctrl.max_lag_steps

    def _issue_rollouts(self) -> None:
        issue_rollouts(self.controller, self._collection_open)

    def _maybe_start_round(self) -> None:
        c = self.controller
        if c.pending_round is not None or c.stop_requested:
            return
        owed = self.steps_target() - c.counters.optim_steps
        if owed > 0:
            assert c.learners is not None  # set up before the loop runs
            steps = min(owed, self.config.controller.max_steps_per_round)
            beta = None
            if self.config.replay.sampler == "prioritized":
                beta = self.config.replay.beta(c.counters.collected_frames)
            c.pending_round = c.learners.start_round(steps, beta=beta)

    def run(self) -> None:
        """Runs until the frame budget and the owed steps are done, or a stop."""
        c = self.controller
        interval = self.config.controller.log_interval_s
        next_progress = time.perf_counter() + interval
        while True:
            c.inbox.poll(c)  # external writes counted, gRPC checkpoint/stop/scale requests served
            c.elastic.step()  # collectors joining or leaving (services.driver.elastic)
            c.maybe_checkpoint()
            self._issue_rollouts()
            self._maybe_start_round()
            if not c.wait_and_process(interval) and not c.inbox.wait(c, interval):
                break  # nothing in flight, owed or expected: budget reached or stop requested
            if time.perf_counter() >= next_progress:
                c.progress()
                next_progress = time.perf_counter() + interval

    def state_dict(self) -> dict:
        """Nothing beyond the driver's counters."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Nothing to restore."""
