"""The driver's side of direct writes (``grpc.direct_writes``; see ``replay.intake``).

:class:`DirectWrites` starts an Insert server in every replay shard, keeps the route clients
fetch (``Experience/GetRoute``), pushes the driver's intake state to the shards' gates, drains
their receipts at every loop boundary, and holds them around a cut. The
:class:`services.driver.inbox.Inbox` calls it at the same points where it gates and counts the
writes that come through the driver. A shard that died answers nothing: its receipts are lost
with its items (never counted), and once Ray has restarted it, :meth:`restart` serves it again
under a new route epoch.
"""

from __future__ import annotations

import logging
import threading
import time

import ray

from replay.health import SHARD_FAILURES
from replay.wire.batches import ROUTE_GROUP, ExternalReceipt

logger = logging.getLogger(__name__)

# Drains go out at most this often (the driver's loop may turn much faster).
DRAIN_INTERVAL_S = 0.01


class DirectWrites:
    """Direct Insert servers of the run's shards.

    Args:
        shards: The run's replay shard actors, in shard order.
        options: What each shard's server needs (see ``ReplayShard.start_intake``).
        timeout: Seconds a shard may take to start its server or answer a hold.
    """

    def __init__(self, shards: list, options: dict, *, timeout: float = 60.0) -> None:
        self.shards = list(shards)
        self.options = {**options, "num_shards": len(self.shards)}
        self.timeout = timeout
        self.state = {"open": False, "closed": False, "total_frames": 0, "published_version": -1}
        self.lock = threading.Lock()
        self.epoch = 0
        self.addresses = ray.get(
            [s.start_intake.remote(self.options) for s in self.shards], timeout=timeout
        )
        self._drains: dict[int, ray.ObjectRef] = {}
        self._drained_at = 0.0

    def route(self) -> tuple[list[str], int, int]:
        """``(shard addresses, group, epoch)`` for ``Experience/GetRoute``."""
        with self.lock:
            return list(self.addresses), ROUTE_GROUP, self.epoch

    def push(
        self, *, open: bool, closed: bool, total_frames: int, published_version: int = -1
    ) -> None:
        """Sends the driver's intake state to every shard's gate (in order, not awaited)."""
        self.state = {
            "open": open,
            "closed": closed,
            "total_frames": total_frames,
            "published_version": published_version,
        }
        for shard in self.shards:
            shard.intake_set.remote(**self.state)

    def drain(self, total_frames: int, published_version: int = -1) -> list[ExternalReceipt]:
        """Receipts the shards have answered since the last call; asks each for more.

        Each request carries the run's frame count and newest published version, which the
        shards check batches' policy versions against.
        """
        receipts: list[ExternalReceipt] = []
        now = time.monotonic()
        if now - self._drained_at < DRAIN_INTERVAL_S:
            return receipts
        self._drained_at = now
        for index, shard in enumerate(self.shards):
            ref = self._drains.get(index)
            if ref is not None:
                ready, _ = ray.wait([ref], timeout=0)
                if not ready:
                    continue
                receipts += self._get(index, ref)
            self._drains[index] = shard.intake_drain.remote(total_frames, published_version)
        self.state["total_frames"] = total_frames
        self.state["published_version"] = max(self.state["published_version"], published_version)
        return receipts

    def hold(self) -> list[ExternalReceipt]:
        """Holds every shard's writes once those in progress are stored; every receipt left."""
        holds = [shard.intake_hold.remote() for shard in self.shards]
        receipts: list[ExternalReceipt] = []
        for index, ref in self._drains.items():  # sent before the holds: answered first
            receipts += self._get(index, ref)
        self._drains = {}
        for index, ref in enumerate(holds):
            receipts += self._get(index, ref)
        return receipts

    def release(self) -> None:
        """Lets the shards' writes in again after a cut."""
        for shard in self.shards:
            shard.intake_release.remote()

    def restart(self, index: int) -> None:
        """Serves a shard Ray restarted again (a new address, a new route epoch)."""
        shard = self.shards[index]
        try:
            address = ray.get(shard.start_intake.remote(self.options), timeout=self.timeout)
        except SHARD_FAILURES as err:
            logger.warning("replay-%d: direct writes not restarted: %s", index, err)
            return
        shard.intake_set.remote(**self.state)
        self._drains.pop(index, None)
        with self.lock:
            self.addresses[index] = address
            self.epoch += 1
        logger.info("replay-%d takes Insert streams again at %s", index, address)

    def _get(self, index: int, ref: ray.ObjectRef) -> list[ExternalReceipt]:
        try:
            return ray.get(ref, timeout=self.timeout)
        except SHARD_FAILURES as err:  # its items died with it: nothing to count
            logger.warning("replay-%d did not answer for direct writes: %s", index, err)
            return []
