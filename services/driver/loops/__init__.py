"""The per-algorithm part of the driver: a loop over the controller's shared runtime.

The :class:`services.driver.controller.Controller` owns what every algorithm shares (setup and
restore, receipts and frame accounting, weights, stop requests, checkpoints, hooks, metrics); a loop
decides what to issue next:

    * :class:`OffPolicyLoop` (DQN, SAC): collectors kept busy asynchronously, learner rounds
      paced by the update-to-data ratio.
    * :class:`OnPolicyLoop` (PPO, A2C, REINFORCE): lockstep iterations; collect one batch with
      the current version, train epochs of minibatches on exactly that batch, publish.

A loop has ``run()`` (until the frame budget or a stop; checkpoints fall between its units of
work) and ``state_dict()`` / ``load_state_dict()`` for its counters in the driver's checkpoint.
"""

from __future__ import annotations

from services.driver.loops.offpolicy import OffPolicyLoop
from services.driver.loops.onpolicy import OnPolicyLoop

LOOPS = {"offpolicy": OffPolicyLoop, "onpolicy": OnPolicyLoop}

__all__ = ["LOOPS", "OffPolicyLoop", "OnPolicyLoop"]
