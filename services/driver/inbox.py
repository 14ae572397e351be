"""The driver's inbox: requests from gRPC threads, served by the driver loop at its boundaries.

gRPC handlers run on server threads; the controller's counters and its loop are owned by the
driver thread. The :class:`Inbox` is the one place they meet:

- **external writes**: a handler calls :meth:`Inbox.begin_write` (it waits while a checkpoint
  cut holds writes or the run is rate limited, and refuses once the intake is closed), sends the
  replay write, and the shard's acknowledgement is handed to :meth:`Inbox.acknowledged`; the
  driver counts each non-duplicate receipt in :meth:`Inbox.poll` through
  ``controller.count_external`` (frames are counted once, by the driver, from receipts) and
  resolves the future the handler waits on.
- **checkpoint, stop and scale requests**: futures resolved by the driver (a checkpoint is cut
  in the loop, through the same consistent-cut path as interval checkpoints; the requests
  waiting at a boundary and those that arrive while the cut runs share that one cut; a scale
  request sets target sizes through ``controller.elastic``).
- **status**: a snapshot of the counters taken at every poll, read by ``GetStatus``.

The controller calls :meth:`Inbox.poll` once per loop iteration, :meth:`Inbox.wait` when
nothing is in flight (with external actors the run goes on until the budget or a stop), and
holds :meth:`Inbox.barrier` around a checkpoint cut, so a cut sees every acknowledged external
write counted and none in flight. Without a gRPC server the inbox is inert.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING

from replay.wire.batches import ExternalReceipt
from replay.wire.service import IntakeClosed

if TYPE_CHECKING:
    from learner.receipts import PublishedWeights
    from services.driver.views import BarrierView, InboxView
    from services.grpc.direct import DirectWrites

logger = logging.getLogger(__name__)
# How often an idle driver polls the shards for direct writes' receipts (grpc.direct_writes).
DIRECT_POLL_S = 0.05

STATES = ("starting", "running", "stopping", "stopped")
# While external writes stream in, the driver is woken to count them at most this often; a
# stream waiting for its answer (see Inbox.expedite) has each acknowledgement counted at once.
WAKE_INTERVAL_S = 0.01


class Inbox:
    """Thread-safe requests from gRPC handler threads to the driver loop (see the module)."""

    def __init__(self) -> None:
        self.enabled = False
        self.state = "starting"
        self.status: dict = {"state": self.state}
        self.weights: PublishedWeights | None = None  # the newest the driver holds
        # The highest version published yet (no batch names a higher one); runs start at 0.
        self.published_version = 0
        self.shards: list = []
        self.on_state: Callable[[str], None] | None = None
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._receipts: list[tuple[ExternalReceipt, Future]] = []
        self._checkpoints: list[Future] = []
        self._scales: list[tuple[dict, bool, Future]] = []  # Control/Scale: sizes, wait
        self._stops: list[str] = []
        self._stop_waiters: list[Future] = []
        self._active = 0  # external writes sent and not yet acknowledged
        self._urgent = 0  # streams waiting for their writes to be counted
        self._last_wake = 0.0
        self._held = False  # a checkpoint cut holds new writes
        self._open = False  # the driver lets external writes in (budget, lag, stop)
        self._closed = False
        self.refusal: str | None = None  # why this run takes no external experience at all
        self.direct: DirectWrites | None = None  # with grpc.direct_writes

    # -- wiring ------------------------------------------------------------------------------
    def enable(self, controller: InboxView) -> None:
        """Makes the inbox live for ``controller`` (called by the gRPC server it serves)."""
        self.enabled = True
        controller.register("setup", self._on_setup)
        controller.register("checkpoint", lambda c, path, seconds: self._snapshot(c))
        controller.register("shutdown", self._on_shutdown)

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            logger.info("gRPC: run state %s", state)
            if self.on_state is not None:
                self.on_state(state)

    def _on_setup(self, controller: InboxView) -> None:
        if controller.algorithm.on_policy:  # lockstep trains on its collectors' rollouts only
            self.refusal = (
                f"{controller.config.algorithm} is on-policy: it takes no external experience"
            )
        self.shards = list(controller.shards)
        self._set_state("running")
        self.poll(controller)

    def _on_shutdown(self, controller: InboxView) -> None:
        self._close_intake(controller, count=False)
        self._snapshot(controller)
        self._set_state("stopped")
        self._fail_requests(IntakeClosed("the run has stopped"))
        path = controller.last_checkpoint
        with self._cond:
            waiters, self._stop_waiters = self._stop_waiters, []
        for future in waiters:
            future.set_result(str(path) if path else "")

    def attach_direct(self, direct) -> None:
        """Gates and counts the shards' direct writes like the driver's own (see the module)."""
        self.direct = direct
        self._push_direct()

    def shard_restarted(self, index: int) -> None:
        """A replay shard came back: its direct Insert server is started again."""
        if self.direct is not None:
            self.direct.restart(index)

    def _push_direct(self) -> None:
        if self.direct is not None:
            self.direct.push(
                open=self._open and not self._closed,
                closed=self._closed,
                total_frames=self.status.get("collected_frames", 0),
                published_version=self.published_version,
            )

    # -- requests (gRPC threads) -----------------------------------------------------------------
    def request_checkpoint(self) -> Future:
        """A future of the path of a checkpoint the driver cuts at its next boundary."""
        future: Future = Future()
        with self._cond:
            if self.state != "running":
                raise IntakeClosed(f"the run is {self.state}")
            self._checkpoints.append(future)
        self._wake.set()
        return future

    def request_scale(self, sizes: dict[str, int], *, wait: bool = False) -> Future:
        """A future of the target sizes the driver sets at its next boundary.

        ``sizes``: ``collectors``, ``shards``, ``world_size`` (0 keeps one). With ``wait`` the
        future resolves once every size is reached (collectors joined or retired).
        """
        future: Future = Future()
        with self._cond:
            if self.state != "running":
                raise IntakeClosed(f"the run is {self.state}")
            self._scales.append((dict(sizes), wait, future))
        self._wake.set()
        return future

    def _scale(self, controller: InboxView, sizes: dict, wait: bool, future: Future) -> None:
        try:
            target = controller.elastic.request(**sizes, cause="Control/Scale")
        except Exception as err:  # a refused size: the requester learns why, the run goes on
            future.set_exception(err)
            return
        if not wait:
            future.set_result(target)
            return
        reached = controller.elastic.wait()
        reached.add_done_callback(lambda done: future.set_result(done.result()))

    def request_stop(self, reason: str) -> Future:
        """Asks for a clean stop; the future gives the final checkpoint's path ('' if none)."""
        future: Future = Future()
        with self._cond:
            if self.state == "stopped":
                future.set_result(self.status.get("last_checkpoint") or "")
                return future
            self._stops.append(reason)
            self._stop_waiters.append(future)
        self._set_open(False)  # no external write is let in after a stop is accepted
        if self.state == "running":
            self._set_state("stopping")
        self._wake.set()
        return future

    def begin_write(self, timeout: float | None = None, count: int = 1) -> None:
        """Waits until external writes may be sent, and counts ``count`` of them as in flight.

        The ``count`` writes are let in together or not at all (a cut never waits for writes
        that their sender has yet to send).

        Raises:
            IntakeClosed: If the run no longer takes external writes.
            TimeoutError: If writes stayed held for ``timeout`` seconds.
        """
        if self.refusal is not None:
            raise IntakeClosed(self.refusal)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._closed and (self._held or not self._open):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("external writes are held (rate limited or a checkpoint)")
                self._cond.wait(left)
            if self._closed:
                raise IntakeClosed(f"the run is {self.state}: it takes no more experience")
            self._active += count

    def acknowledged(self, receipt: ExternalReceipt | None, counted: Future | None = None) -> None:
        """Ends an in-flight write; a receipt (None: the write failed) awaits the driver.

        ``counted`` gets the run's frame count once the driver has counted the receipt.
        """
        with self._cond:
            self._active -= 1
            if receipt is not None:
                self._receipts.append((receipt, counted or Future()))
            self._cond.notify_all()
            now = time.monotonic()
            wake = self._urgent > 0 or now - self._last_wake >= WAKE_INTERVAL_S
            if wake:
                self._last_wake = now
        if wake:
            self._wake.set()

    @contextlib.contextmanager
    def expedite(self) -> Iterator[None]:
        """While a stream waits for its answer, its acknowledgements are counted at once."""
        with self._cond:
            self._urgent += 1
        self._wake.set()
        try:
            yield
        finally:
            with self._cond:
                self._urgent -= 1

    # -- the driver's side -------------------------------------------------------------------
    def poll(self, controller: InboxView) -> None:
        """Counts acknowledged external writes, serves stop and checkpoint requests."""
        if not self.enabled:
            return
        self._count(controller)
        with self._cond:
            stops, self._stops = self._stops, []
            checkpoints, self._checkpoints = self._checkpoints, []
            scales, self._scales = self._scales, []
        for reason in stops:
            controller.request_stop(reason)
        if checkpoints:
            self._cut(controller, checkpoints)
        for sizes, wait, future in scales:
            self._scale(controller, sizes, wait, future)
        if controller.stop_requested and self.state == "running":
            self._set_state("stopping")
        weights = controller.weights
        if weights is not None:
            self.published_version = max(self.published_version, weights.version)
        self.weights = weights
        self._set_open(self._may_write(controller))
        self._snapshot(controller)

    def _cut(self, controller: InboxView, requests: list[Future]) -> None:
        """One checkpoint for ``requests`` and for every request that arrives while it runs."""
        error: Exception | None = None
        try:
            path = controller.checkpoint()
        except Exception as err:  # the requesters learn why; the run goes on
            logger.exception("gRPC checkpoint request failed")
            path, error = None, err
        with self._cond:
            requests += self._checkpoints  # they came during the cut: it answers them too
            self._checkpoints = []
        for future in requests:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(None if path is None else str(path))

    def wait(self, controller: InboxView, timeout: float) -> bool:
        """With nothing in flight: whether the loop should go on waiting for external frames.

        Waits up to ``timeout`` for a request or an acknowledged write. Returns False when the
        run is done (budget reached or stop requested); the intake is then closed and what was
        acknowledged counted (True if that leaves learner steps owed).
        """
        if not self.enabled:
            return False
        self.poll(controller)
        ctrl = controller.config.controller
        done = controller.stop_requested or controller.counters.collected_frames >= (
            ctrl.total_frames
        )
        if done:
            if self._closed:
                return False
            self._set_state("stopping")
            self._close_intake(controller, count=True)
            return not controller.stop_requested and controller.steps_target() > (
                controller.counters.optim_steps
            )
        if self.direct is not None:  # shards store direct writes without waking the driver
            timeout = min(timeout, DIRECT_POLL_S)
        self._wake.wait(timeout)
        self._wake.clear()
        return True

    @contextlib.contextmanager
    def barrier(self, controller: BarrierView) -> Iterator[None]:
        """Holds new external writes and counts every acknowledged one (around a cut)."""
        if not self.enabled:
            yield
            return
        with self._cond:
            self._held = True
            while self._active:
                self._cond.wait()
        try:
            held: list[ExternalReceipt] = self.direct.hold() if self.direct is not None else []
            self._count(controller, held)
            yield
        finally:
            with self._cond:
                self._held = False
                self._cond.notify_all()
            if self.direct is not None:
                self.direct.release()

    def _may_write(self, controller: InboxView) -> bool:
        c, ctrl = controller.counters, controller.config.controller
        if controller.stop_requested or c.collected_frames >= ctrl.total_frames:
            return False
        return controller.steps_target() - c.optim_steps <= ctrl.max_lag_steps

    def _set_open(self, value: bool) -> None:
        with self._cond:
            value = value and not self._stops  # a stop accepted meanwhile keeps writes out
            changed = value != self._open
            if changed:
                self._open = value
                self._cond.notify_all()
        if changed:
            self._push_direct()

    def _count(self, controller: BarrierView, direct: list | None = None) -> None:
        with self._cond:
            receipts, self._receipts = self._receipts, []
        if direct is None and self.direct is not None:
            direct = self.direct.drain(controller.counters.collected_frames, self.published_version)
        receipts += [(receipt, Future()) for receipt in direct or ()]
        for receipt, _ in receipts:
            if receipt.frames:
                controller.count_external(receipt)
        if receipts:
            self._snapshot(controller)  # GetStatus shows them once their Insert is answered
        for _, future in receipts:
            future.set_result(controller.counters.collected_frames)

    def _close_intake(self, controller: InboxView, *, count: bool) -> None:
        """Refuses new writes, waits for the ones in flight, counts them (if ``count``)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._active == 0, timeout=30.0)
        held: list[ExternalReceipt] = []
        if self.direct is not None:
            self._push_direct()
            held = self.direct.hold()
        if count:
            self._count(controller, held)
        else:
            self._fail_receipts(IntakeClosed("the run stopped before counting this batch"))

    def _fail_receipts(self, error: Exception) -> None:
        with self._cond:
            receipts, self._receipts = self._receipts, []
        for _, future in receipts:
            future.set_exception(error)

    def _fail_requests(self, error: Exception) -> None:
        with self._cond:
            checkpoints, self._checkpoints = self._checkpoints, []
            scales, self._scales = self._scales, []
        for future in [*checkpoints, *(future for _, _, future in scales)]:
            future.set_exception(error)
        self._fail_receipts(error)

    def _snapshot(self, controller: BarrierView) -> None:
        c = controller.counters
        last = controller.last_checkpoint
        self.status = {
            **dataclasses.asdict(c),
            "state": self.state,
            "total_frames": controller.config.controller.total_frames,
            "last_checkpoint": str(last) if last else "",
            "stop_reason": controller.stop_reason or "",
            "epsilon": float(controller.exploration().get("epsilon", 0.0)),
        }
