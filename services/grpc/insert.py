"""The replay side of ``Experience/Insert``: routing, coalesced shard calls, acknowledgements.

A Ray call costs as much CPU as moving a large batch (``docs/benchmarks.md``), so an Insert
stream does not make one call per batch. Its handler thread checks each batch and
queues it; the stream's sender thread takes what is queued, keeps at most ``window`` shard calls
in flight and, when it may send, sends everything queued meanwhile: one call per shard carrying
several batches (more batches per call exactly when the shards are the bottleneck). Each batch
is acknowledged on its own receipt, and the driver counts it from there (see
``services.driver.inbox``).

Memory is bounded by flow control: the queue holds at most ``window`` batches, so while the
sender waits (the intake gate is shut, the shards are slow) the handler stops reading and gRPC
stops the client; a batch's arrays are dropped once its shard call has taken them (Ray copies
its arguments when the call is made), so a stream keeps at most a few messages beyond what is
stored, and a counted batch leaves only its wire receipt (a few numbers): its episodes and
write receipt are let go as the stream goes on, so a stream's memory stays flat however long.

Routing (``replay.wire.batches.shard_of``): batch ``seq`` of writer ``w`` goes to shard
``(crc32(w) + seq // ROUTE_GROUP) % shards``: a writer's batches take turns over every shard in
runs of ``ROUTE_GROUP`` (so consecutive batches can share a call), and a retried
``(writer, seq)`` meets the shard that deduplicates it. Batches of at least
``SHARED_MIN_BYTES`` for a shard on the driver's node travel through shared memory
(``replay.shm``); the rest as Ray arguments.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import queue
import threading

import numpy as np
import ray

from replay.client import ReplayClient
from replay.shm import SharedBlocks
from replay.wire import experience_pb2 as pb
from replay.wire.batches import WRITER_PREFIX, ExternalReceipt, shard_of
from replay.wire.service import receipt_message
from services.driver.inbox import Inbox

SHARED_MIN_BYTES = 100 << 10
# Batches one stream keeps uncounted, in windows of shard calls (then it waits for the count).
SETTLE_AHEAD = 4


@dataclasses.dataclass
class Pending:
    """One checked batch of a stream, until the driver has counted it.

    Attributes:
        arrays: The batch (None once its shard call has taken it).
        writer: The replay writer (``external/<client writer id>@<caller>``, see
            ``replay.wire.leases.scoped_writer``).
        seq: The client's batch number.
        client_writer: The client's writer id.
        episode_returns: Episodes the client reported finished in the batch.
        episode_lengths: Their lengths.
        frames: Frames the batch adds if stored (its transitions, or its sequences' new
            steps, ``replay.wire.sequences``).
        counted: Resolves to the run's frame count once the driver counted the batch.
        receipt: Set when the shard acknowledged it.
    """

    arrays: dict[str, np.ndarray] | None
    writer: str
    seq: int
    client_writer: str
    episode_returns: tuple[float, ...] = ()
    episode_lengths: tuple[int, ...] = ()
    frames: int = 0
    counted: concurrent.futures.Future = dataclasses.field(
        default_factory=concurrent.futures.Future
    )
    receipt: ExternalReceipt | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of the batch."""
        assert self.arrays is not None  # not sent yet
        return sum(array.nbytes for array in self.arrays.values())

    @property
    def stored(self) -> ExternalReceipt:
        """The shard's receipt of the batch (once :meth:`InsertStream.finish` returned it)."""
        assert self.receipt is not None  # finish() waits until every batch is counted
        return self.receipt


class ReplayRoute:
    """The shards of the run as seen from the driver's gRPC server (shared by its streams).

    Args:
        inbox: The driver's inbox, whose ``shards`` are the run's.
        shared_bytes: Size limit of the shared-memory pool (0: always send by Ray).
    """

    def __init__(self, inbox: Inbox, shared_bytes: int = 0) -> None:
        self.inbox = inbox
        self.shared = SharedBlocks(max_bytes=shared_bytes) if shared_bytes else None
        self.source: list | None = None
        self._follow()

    def _follow(self) -> None:
        """Routes to the run's current shards (a live resize replaces the inbox's list)."""
        shards = self.inbox.shards
        if shards is self.source:
            return
        self.source = shards
        self.replay = ReplayClient(shards)
        self.local = [False] * len(shards)
        if self.shared is not None:
            here = ray.get_runtime_context().get_node_id()
            nodes = ray.get([shard.node_id.remote() for shard in shards], timeout=60)
            self.local = [node == here for node in nodes]

    def shard_of(self, writer: str, seq: int) -> int:
        """The shard that stores (and deduplicates) batch ``seq`` of ``writer``."""
        return shard_of(writer, seq, len(self.replay.shards))

    def send(self, items: list[Pending]) -> list[concurrent.futures.Future]:
        """One call per shard (and per way) for ``items``; returns the calls' futures."""
        self._follow()
        groups: dict[tuple[int, bool], list] = collections.defaultdict(list)
        for item in items:
            # Routed by the client's writer id (as the client routes direct writes), stored
            # under the caller-scoped writer (``replay.wire.leases``).
            index = self.shard_of(WRITER_PREFIX + item.client_writer, item.seq)
            shared = None
            if self.local[index] and item.nbytes >= SHARED_MIN_BYTES:
                assert self.shared is not None and item.arrays is not None  # local: shared on
                shared = self.shared.put(item.arrays)
            groups[index, shared is not None].append((item, shared))
        futures = []
        for (index, by_memory), members in groups.items():
            shard = self.replay.shards[index]
            if by_memory:
                args = [(s.path, s.layout, i.writer, i.seq) for i, s in members]
                ref = shard.write_shared_many.remote(args)
            else:
                ref = shard.write_many.remote([(i.arrays, i.writer, i.seq) for i, _ in members])
            future = ref.future()
            future.add_done_callback(lambda done, m=members: self._acked(done, m))
            futures.append(future)
        return futures

    def _acked(self, done: concurrent.futures.Future, members: list) -> None:
        """A shard answered (or failed) a call: each batch's receipt goes to the driver."""
        for _, shared in members:
            if shared is not None:
                assert self.shared is not None  # what it put
                self.shared.release(shared.block)
        try:
            receipts = done.result()
        except BaseException as err:
            for item, _ in members:
                item.counted.set_exception(err)
                self.inbox.acknowledged(None)
            return
        for (item, _), write in zip(members, receipts, strict=True):
            fresh = not write.duplicate
            item.receipt = ExternalReceipt(
                writer_id=item.client_writer,
                seq=item.seq,
                frames=item.frames if fresh else 0,
                episode_returns=item.episode_returns if fresh else (),
                episode_lengths=item.episode_lengths if fresh else (),
                write=write,
            )
            self.inbox.acknowledged(item.receipt, item.counted)

    def close(self) -> None:
        """Frees the shared-memory blocks."""
        if self.shared is not None:
            self.shared.close()


class InsertStream:
    """The sender thread of one Insert call (see the module docstring).

    Args:
        route: The server's :class:`ReplayRoute`.
        inbox: The driver's inbox (writes wait while it holds them).
        window: Shard calls in flight at most.
        timeout: Seconds a write may wait to be let in.
    """

    def __init__(self, route: ReplayRoute, inbox: Inbox, *, window: int, timeout: float) -> None:
        self.route = route
        self.inbox = inbox
        self.window = window
        self.timeout = timeout
        self.items: collections.deque[Pending] = collections.deque()  # not yet settled
        self.answered: list[pb.WriteReceipt] = []
        self.frames = 0
        self.total_frames = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue[Pending | None] = queue.Queue(maxsize=window)
        self._calls: collections.deque[concurrent.futures.Future] = collections.deque()
        self._thread = threading.Thread(target=self._run, name="grpc-insert", daemon=True)
        self._thread.start()

    def add(self, item: Pending) -> None:
        """Queues a checked batch; waits while ``window`` batches are queued (flow control).

        Raises:
            IntakeClosed, TimeoutError: The sender's error, if any, or a queue that stayed full
                for ``timeout`` seconds.
        """
        if self.error is not None:
            raise self.error
        try:
            self._queue.put(item, timeout=self.timeout)
        except queue.Full:
            raise TimeoutError("external writes are held (rate limited or a checkpoint)") from None
        self.items.append(item)
        while self.items and self.items[0].counted.done():
            self._settle(self.items.popleft())
        if len(self.items) > SETTLE_AHEAD * self.window:  # the driver lags: wait for its count
            with self.inbox.expedite():
                self._settle(self.items.popleft())

    def _settle(self, item: Pending) -> None:
        """Keeps a counted batch's wire receipt and count, and lets the batch go."""
        total = item.counted.result(timeout=self.timeout)
        self.answered.append(receipt_message(item.stored))
        self.frames += item.stored.frames
        self.total_frames = max(self.total_frames, total)

    def finish(self) -> tuple[list[pb.WriteReceipt], int, int]:
        """Sends what is queued, waits until every batch is counted.

        Returns:
            The batches' wire receipts in order, the frames they counted and the run's count.

        Raises:
            IntakeClosed, TimeoutError, ray.exceptions.RayError: As the sender or a shard met.
        """
        try:
            self._queue.put(None, timeout=self.timeout)
        except queue.Full:
            raise TimeoutError("the stream's writes stayed held") from None
        self._thread.join(self.timeout)
        if self.error is not None:
            raise self.error
        with self.inbox.expedite():
            while self.items:
                self._settle(self.items.popleft())
        return self.answered, self.frames, self.total_frames

    def close(self) -> None:
        """Lets the sender thread end (what it already took is still sent, the rest dropped)."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        with contextlib.suppress(queue.Full):  # the sender took a None already
            self._queue.put_nowait(None)

    def _take(self) -> tuple[list[Pending], bool]:
        first = self._queue.get()
        taken = [] if first is None else [first]
        ended = first is None
        while not ended:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                ended = True
            else:
                taken.append(item)
        return taken, ended

    def _run(self) -> None:
        ended = False
        while not ended:
            taken, ended = self._take()
            while self._calls and self._calls[0].done():
                self._calls.popleft()
            if len(self._calls) >= self.window:
                concurrent.futures.wait([self._calls.popleft()])
                if not ended:  # what arrived meanwhile joins these calls
                    more, ended = self._take_ready()
                    taken += more
            if not taken:
                continue
            if self.error is not None:
                for item in taken:
                    item.counted.set_exception(self.error)
                continue
            try:
                self.inbox.begin_write(timeout=self.timeout, count=len(taken))
            except BaseException as err:
                self.error = err
                for item in taken:
                    item.counted.set_exception(err)
                continue
            try:
                self._calls.extend(self.route.send(taken))
            except BaseException as err:
                self.error = err
                for item in taken:
                    item.counted.set_exception(err)
                    self.inbox.acknowledged(None)
            for item in taken:
                item.arrays = None  # the shard call holds its own copy

    def _take_ready(self) -> tuple[list[Pending], bool]:
        taken: list[Pending] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return taken, False
            if item is None:
                return taken, True
            taken.append(item)
