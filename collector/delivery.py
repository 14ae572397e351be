"""A collector's replay writes: ``(writer_id, seq)``, sending, and acknowledgement with failover.

A collector is one writer of the replay service. Its writer id carries an incarnation token
(:func:`new_writer_id`), so a restarted or restored collector, whose sequence numbers start
again, is never mistaken for a retry of writes already stored. The stepper thread sends every
write (:meth:`ReplayWriter.send`, so writes leave in sequence order); a rollout call then waits
for the acknowledgement (:meth:`ReplayWriter.acknowledged`). A write its home shard could not
take (dead or restarting) goes to the next shards in turn (:func:`failover_shards`) under the
same ``(writer_id, seq)``: a shard that died lost what it held, so the retry never duplicates a
live item.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid

import ray

from collector.receipts import RolloutReceipt
from collector.rollout import RolloutBatch
from replay.client import ReplayClient
from replay.health import SHARD_FAILURES
from replay.receipts import WriteReceipt

logger = logging.getLogger(__name__)


def new_writer_id(collector_id: int) -> str:
    """A fresh writer id ``collector-<i>/<token>`` for one incarnation of collector ``i``."""
    return f"collector-{collector_id}/{uuid.uuid4().hex[:8]}"


def failover_shards(home: int, num_shards: int) -> list[int]:
    """The shards a write its ``home`` shard could not take is sent to, in order.

    Examples:
        >>> failover_shards(2, 4)
        [3, 0, 1]
        >>> failover_shards(0, 1)
        []
    """
    return [(home + k) % num_shards for k in range(1, num_shards)]


@dataclasses.dataclass(frozen=True)
class SentRollout:
    """A stepped rollout whose replay write is on its way (the stepper thread's hand-back).

    Attributes:
        batch: The rollout's transitions and episode statistics.
        seq: The write's sequence number.
        generation: Learner generation of the weights that acted.
        version: Model version of the weights that acted.
        pending: Reference of the home shard's :class:`~replay.receipts.WriteReceipt`.
        rollout_s: Seconds of stepping.
        sent_at: ``time.perf_counter()`` when the write was sent.
        work_s: Seconds of the stepper's whole job (weights applied, stepping, write sent).
    """

    batch: RolloutBatch
    seq: int
    generation: int
    version: int
    pending: ray.ObjectRef
    rollout_s: float
    sent_at: float
    work_s: float = 0.0

    def receipt(self, collector_id: int, write: WriteReceipt) -> RolloutReceipt:
        """The rollout's receipt, once ``write`` acknowledged its transitions."""
        return RolloutReceipt(
            collector_id=collector_id,
            seq=self.seq,
            frames=self.batch.frames,
            episode_returns=tuple(self.batch.episode_returns),
            episode_lengths=tuple(self.batch.episode_lengths),
            policy_generation=self.generation,
            policy_version=self.version,
            writes=(write,),
            rollout_s=self.rollout_s,
            write_s=time.perf_counter() - self.sent_at,
            invalid_actions=self.batch.invalid_actions,
            work_s=self.work_s,
        )


class ReplayWriter:
    """One collector's writer id and sequence numbers, and the writes sent under them.

    Writes go to shard ``collector_id % num_shards`` (their home) unless it cannot take them.

    Args:
        replay: Client of the run's replay shards.
        collector_id: Index of the collector.
    """

    def __init__(self, replay: ReplayClient, collector_id: int) -> None:
        self.replay = replay
        self.collector_id = collector_id
        self.writer_id = new_writer_id(collector_id)
        self.seq = 0

    def renew(self, seq: int) -> None:
        """Continues from ``seq`` under a new writer id (after a state restore)."""
        self.seq = seq
        self.writer_id = new_writer_id(self.collector_id)

    def send(self, transitions) -> tuple[int, ray.ObjectRef]:
        """Sends the next write to the home shard; returns its ``seq`` and receipt reference.

        Called on the stepper thread only, so writes leave in sequence order.
        """
        seq = self.seq
        self.seq += 1
        pending = self.replay.write_async(transitions, self.writer_id, seq, shard=self.collector_id)
        return seq, pending

    def acknowledged(self, sent: SentRollout) -> WriteReceipt:
        """Waits for a write's receipt; a write its shard could not take goes to the next one.

        Raises:
            ray.exceptions.RayActorError: If no shard took the write.
        """
        write = self._stored(sent)
        if write.duplicate:  # cannot happen with a fresh writer id; would mean lost frames
            logger.warning(
                "collector %d: write %d acknowledged as a duplicate", self.collector_id, sent.seq
            )
        return write

    def _stored(self, sent: SentRollout) -> WriteReceipt:
        num_shards = len(self.replay.shards)
        try:
            return ray.get(sent.pending)
        except SHARD_FAILURES as err:
            failure = err
        for shard in failover_shards(self.collector_id % num_shards, num_shards):
            logger.warning(
                "collector-%d: replay-%d did not take write %d (%s); sent to replay-%d",
                self.collector_id,
                (shard - 1) % num_shards,
                sent.seq,
                failure,
                shard,
            )
            try:
                batch = sent.batch.transitions
                return self.replay.write(batch, self.writer_id, sent.seq, shard=shard)
            except SHARD_FAILURES as err:
                failure = err
        raise failure
