"""The per-algorithm part of the driver: a loop over the controller's shared runtime.

The :class:`services.driver.controller.Controller` owns what every algorithm shares (setup and
restore, receipts and frame accounting, weights, stop requests, checkpoints, hooks, metrics); a loop
decides what to issue next:

    * :class:`OffPolicyLoop` (DQN, SAC): collectors kept busy asynchronously, learner rounds
      paced by the update-to-data ratio.
    * :class:`OnPolicyLoop` (PPO, A2C, REINFORCE): lockstep iterations; collect one batch with
      the current version, train epochs of minibatches on exactly that batch, publish.
    * :class:`AsyncOnPolicyLoop` (IMPALA, APPO): collectors keep collecting trajectory chunks
      into a bounded learner queue; rounds train on each batch as it arrives (V-trace corrects
      the lag; chunks older than ``learner.max_policy_lag`` are dropped).

With ``run.deterministic`` the loops are :class:`DeterministicOffPolicyLoop` and
:class:`DeterministicOnPolicyLoop` (``deterministic.py``): ticks scheduled by counts, shards
committed between ticks (:func:`make_loop` picks).

A loop has ``run()`` (until the frame budget or a stop; checkpoints fall between its units of
work) and ``state_dict()`` / ``load_state_dict()`` for its counters in the driver's checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.driver.loops.asynchronous import AsyncOnPolicyLoop
from services.driver.loops.deterministic import (
    DeterministicOffPolicyLoop,
    DeterministicOnPolicyLoop,
)
from services.driver.loops.offpolicy import OffPolicyLoop
from services.driver.loops.onpolicy import OnPolicyLoop

if TYPE_CHECKING:
    from collections.abc import Callable

    from services.driver.views import Loop, LoopView

LOOPS: dict[str, Callable[[LoopView], Loop]] = {
    "offpolicy": OffPolicyLoop,
    "onpolicy": OnPolicyLoop,
    "async": AsyncOnPolicyLoop,
}
DETERMINISTIC_LOOPS: dict[str, Callable[[LoopView], Loop]] = {
    "offpolicy": DeterministicOffPolicyLoop,
    "onpolicy": DeterministicOnPolicyLoop,
}


def make_loop(controller: LoopView, kind: str) -> Loop:
    """The loop of ``kind`` (``offpolicy``, ``onpolicy``, ``async``) for the run mode."""
    loops = DETERMINISTIC_LOOPS if controller.config.run.deterministic else LOOPS
    return loops[kind](controller)


__all__ = [
    "DETERMINISTIC_LOOPS",
    "LOOPS",
    "AsyncOnPolicyLoop",
    "DeterministicOffPolicyLoop",
    "DeterministicOnPolicyLoop",
    "OffPolicyLoop",
    "OnPolicyLoop",
    "make_loop",
]
