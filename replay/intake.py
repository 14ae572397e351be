"""Insert streams straight into a replay shard (``grpc.direct_writes``).

Forwarding external batches through the driver costs a copy into shared memory, a Ray call and
a second copy in the shard, on top of the driver's own gRPC receive (``services.grpc.insert``).
With direct writes each replay shard also serves ``relayrl.v1.Experience/Insert`` itself: a
client asks the driver for the route (``Experience/GetRoute``: one address per shard) and
streams each batch to the shard that owns it (``replay.wire.batches.shard_of``); the shard checks
it against the run's transition spec exactly as the driver does and stores it with one copy.

The driver keeps its say, mirrored in every shard by an :class:`IntakeGate`:

- **open/closed**: the driver pushes its intake state (budget, learner lag, stop) whenever it
  changes; a write waits while the gate is shut and is refused (UNAVAILABLE) once it is closed.
- **cuts**: around a consistent checkpoint the driver holds every gate, which waits until the
  writes in progress are stored and hands back their receipts, and releases it after the cut.
- **counting**: each stored batch leaves an :class:`replay.wire.batches.ExternalReceipt` in the
  gate; the driver drains them at every loop boundary and counts them like any other (frames,
  budget, UTD pacing, Prometheus ``source="external"``). A shard answers a stream once its
  batches are stored; ``total_frames`` in the reply is the run's count as last pushed.

Bad input gets the driver's answers (INVALID_ARGUMENT naming the key, UNAUTHENTICATED without
the token); a batch routed to the wrong shard is refused naming ``seq``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc

from replay.wire import experience_pb2 as pb
from replay.wire.batches import (
    BatchError,
    ExternalReceipt,
    TransitionSpec,
    check_insert,
    shard_of,
)
from replay.wire.service import (
    IntakeClosed,
    TokenAuth,
    experience_handler,
    receipt_message,
    remaining_seconds,
)

logger = logging.getLogger(__name__)


WRITES_AHEAD = 4  # batches one stream may have received and not yet stored


class IntakeGate:
    """A shard's direct writes as the driver allows them (thread-safe; see the module)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.open = False
        self.closed = False
        self.held = False
        self.active = 0
        self.total_frames = 0
        self._receipts: list[ExternalReceipt] = []

    def set(self, *, open: bool, closed: bool, total_frames: int) -> None:
        """The driver's intake state (pushed whenever it changes)."""
        with self._cond:
            self.open, self.closed = open, closed
            self.total_frames = max(self.total_frames, total_frames)
            self._cond.notify_all()

    def enter(self, timeout: float) -> None:
        """Waits until a write may be stored and counts it as in progress.

        Raises:
            IntakeClosed: Once the run takes no more experience.
            TimeoutError: If writes stayed shut for ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self.closed and (self.held or not self.open):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("external writes are held (rate limited or a checkpoint)")
                self._cond.wait(left)
            if self.closed:
                raise IntakeClosed("the run takes no more experience")
            self.active += 1

    def leave(self, receipt: ExternalReceipt | None) -> None:
        """Ends a write; its receipt (None: it failed) waits for the driver's drain."""
        with self._cond:
            self.active -= 1
            if receipt is not None:
                self._receipts.append(receipt)
            self._cond.notify_all()

    def drain(self, total_frames: int = 0) -> list[ExternalReceipt]:
        """The receipts stored since the last drain; ``total_frames``: the run's count now."""
        with self._cond:
            self.total_frames = max(self.total_frames, total_frames)
            receipts, self._receipts = self._receipts, []
            return receipts

    def hold(self, timeout: float = 60.0) -> list[ExternalReceipt]:
        """Shuts new writes, waits for those in progress; returns every undrained receipt."""
        with self._cond:
            self.held = True
            if not self._cond.wait_for(lambda: self.active == 0, timeout=timeout):
                raise TimeoutError(f"{self.active} direct writes still in progress")
            receipts, self._receipts = self._receipts, []
            return receipts

    def release(self) -> None:
        """Lets writes in again after a cut."""
        with self._cond:
            self.held = False
            self._cond.notify_all()


class ShardInsertServicer:
    """``Experience/Insert`` of one shard (``GetWeights`` and ``GetRoute`` are the driver's).

    Args:
        write: Stores ``(arrays, writer, seq)`` in the shard's table; returns its receipt.
        gate: The shard's :class:`IntakeGate`.
        spec: The run's transition spec.
        shard_id: This shard's index.
        num_shards: Shards in the run.
        max_bytes: Largest batch.
    """

    def __init__(
        self,
        write: Callable,
        gate: IntakeGate,
        spec: TransitionSpec,
        *,
        shard_id: int,
        num_shards: int,
        max_bytes: int,
    ) -> None:
        self.write = write
        self.gate = gate
        self.spec = spec
        self.shard_id = shard_id
        self.num_shards = num_shards
        self.max_bytes = max_bytes

    def Insert(self, request_iterator, context):
        """Checks and stores each batch; answers with the receipts once all are stored.

        A batch is checked on the stream's thread and copied into the table on a writer thread
        (numpy copies run without the GIL), so the next message is received meanwhile.
        """
        timeout = remaining_seconds(context)
        pending: list = []
        try:
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-write") as writer:
                for request in request_iterator:
                    checked = self._check(request)
                    self.gate.enter(timeout)
                    pending.append(writer.submit(self._store, request, checked))
                    if len(pending) > WRITES_AHEAD:  # bounds the batches held in memory
                        pending[-WRITES_AHEAD - 1].result()
                receipts = [future.result() for future in pending]
        except BatchError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except IntakeClosed as err:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
        except TimeoutError as err:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"insert timed out: {err}")
        return pb.InsertReply(
            receipts=[receipt_message(r) for r in receipts],
            frames_counted=sum(r.frames for r in receipts),
            total_frames=self.gate.total_frames,
        )

    def _check(self, request) -> tuple[str, dict]:
        writer, arrays = check_insert(request, self.spec, max_bytes=self.max_bytes)
        owner = shard_of(writer, request.seq, self.num_shards)
        if owner != self.shard_id:
            raise BatchError(
                f"seq: batch {request.seq} of writer {request.writer_id!r} belongs to shard "
                f"{owner}, not {self.shard_id} (see Experience/GetRoute)"
            )
        return writer, arrays

    def _store(self, request, checked: tuple[str, dict]) -> ExternalReceipt:
        writer, arrays = checked
        receipt = None
        try:
            write = self.write(arrays, writer, request.seq)
            fresh = not write.duplicate
            receipt = ExternalReceipt(
                writer_id=request.writer_id,
                seq=request.seq,
                frames=write.num_items if fresh else 0,
                episode_returns=tuple(request.episode_returns) if fresh else (),
                episode_lengths=tuple(request.episode_lengths) if fresh else (),
                write=write,
            )
        finally:
            self.gate.leave(receipt)
        return receipt


def start_server(
    servicer: ShardInsertServicer,
    *,
    host: str,
    advertise: str,
    token: str | None,
    max_workers: int,
) -> tuple[grpc.Server, str]:
    """Starts a shard's Insert server on ``host`` (an OS-chosen port).

    Returns:
        The server and the address clients use (``advertise:port``).

    Raises:
        OSError: If the address cannot be bound.
    """
    limit = 2 * servicer.max_bytes + (1 << 20)
    server = grpc.server(
        ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="intake"),
        interceptors=[TokenAuth(token)] if token else [],
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
        ],
    )
    server.add_generic_rpc_handlers((experience_handler(servicer, methods=("Insert",)),))
    bind = f"[{host}]" if ":" in host else host
    port = server.add_insecure_port(f"{bind}:0")
    if port == 0:
        raise OSError(f"grpc.host: a replay shard cannot bind {bind}")
    server.start()
    shown = f"[{advertise}]" if ":" in advertise else advertise
    return server, f"{shown}:{port}"
