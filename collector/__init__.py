"""Everything that makes experience.

Layout:
    * ``env``: gymnasium vector envs (next-step autoreset) and per-env seeds derived from the run
      seed and the collector index.
    * ``policy``: :class:`ModelSpec` (the Q-network architecture shared with the learners) and
      :class:`EpsilonGreedy`, batched over envs, epsilon set by the driver on each rollout.
    * ``rollout``: :class:`RolloutWorker`, the pure core. It drops the auto-reset steps of
      gymnasium's ``NEXT_STEP`` mode, so no transition spans two episodes, and keeps env state
      across rollouts. Only written transitions count as frames.
    * ``actor``: the ``Collector`` Ray actor: applies weights only when newer by
      ``(generation, version)``, stores the policy version in every transition, writes each
      rollout to its replay shard with ``(writer_id, seq)`` and returns a ``RolloutReceipt``.
    * ``group``: :class:`CollectorGroup`, named actors ``<run>.collector-<i>``, restarted by Ray;
      it remembers which weights each collector holds so a rollout carries weights only when the
      collector is behind.
"""

from collector.actor import Collector
from collector.group import CollectorGroup
from collector.policy import EpsilonGreedy, ModelSpec
from collector.receipts import RolloutReceipt
from collector.rollout import RolloutBatch, RolloutWorker

__all__ = [
    "Collector",
    "CollectorGroup",
    "EpsilonGreedy",
    "ModelSpec",
    "RolloutBatch",
    "RolloutReceipt",
    "RolloutWorker",
]
