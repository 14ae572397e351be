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

Bad input gets the driver's answers, from the same code (:mod:`replay.wire`): INVALID_ARGUMENT
naming the key or field, UNAUTHENTICATED without a credential, RESOURCE_EXHAUSTED beyond the
stream or rate limits (and a writer id is scoped to its caller alike, see
:mod:`replay.wire.leases`: one dedup state per writer on both paths); a batch routed to the wrong
shard is refused naming ``seq``. A batch naming a policy version the shard has not heard
of yet waits a moment for the driver's next word (:data:`VERSION_WAIT_S`) before it is refused.

A shard binds the interface the operator chose (``grpc.host``) where its node has it, else its
node's own address (never every interface unless ``grpc.host`` is a wildcard), with the run's
TLS and credentials (:func:`start_intake_server`).
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc

from replay.wire import experience_pb2 as pb
from replay.wire.auth import Caller, caller_identity
from replay.wire.batches import (
    ROUTE_GROUP,
    WRITER_PREFIX,
    BatchError,
    ExternalReceipt,
    shard_of,
    shown,
)
from replay.wire.leases import SEQ_WINDOW, WriterLeases
from replay.wire.planes import RECEIVE_S
from replay.wire.secrets import served_options
from replay.wire.service import (
    Admission,
    IntakeClosed,
    abort_refused,
    experience_handler,
    receipt_message,
    remaining_seconds,
)
from replay.wire.transport import WILDCARDS, StreamSlots, bind, insert_streams, make_server

logger = logging.getLogger(__name__)


WRITES_AHEAD = 4  # batches one stream may have received and not yet stored
VERSION_WAIT_S = 5.0  # a batch naming a newer policy version waits this long to hear of it


class IntakeGate:
    """A shard's direct writes as the driver allows them (thread-safe; see the module)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.open = False
        self.closed = False
        self.held = False
        self.active = 0
        self.total_frames = 0
        self.published_version = 0  # every run starts from its version 0 weights
        self.version_wait_s = VERSION_WAIT_S
        self._receipts: list[ExternalReceipt] = []

    def set(
        self, *, open: bool, closed: bool, total_frames: int, published_version: int = -1
    ) -> None:
        """The driver's intake state (pushed whenever it changes)."""
        with self._cond:
            self.open, self.closed = open, closed
            self.total_frames = max(self.total_frames, total_frames)
            self.published_version = max(self.published_version, published_version)
            self._cond.notify_all()

    def max_version(self, named: int) -> int:
        """The newest published version, after waiting up to ``version_wait_s`` for ``named``."""
        with self._cond:
            self._cond.wait_for(lambda: self.published_version >= named, self.version_wait_s)
            return self.published_version

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

    def drain(self, total_frames: int = 0, published_version: int = -1) -> list[ExternalReceipt]:
        """The receipts stored since the last drain; the run's frame count and version now."""
        with self._cond:
            self.total_frames = max(self.total_frames, total_frames)
            if published_version > self.published_version:
                self.published_version = published_version
                self._cond.notify_all()
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
        admission: The batch checks and writer leases (the driver's, see ``replay.wire``).
        shard_id: This shard's index.
        num_shards: Shards in the run.
    """

    def __init__(
        self,
        write: Callable,
        gate: IntakeGate,
        admission: Admission,
        *,
        shard_id: int,
        num_shards: int,
    ) -> None:
        self.write = write
        self.gate = gate
        self.admission = admission
        self.spec = admission.spec
        self.shard_id = shard_id
        self.num_shards = num_shards
        self.max_bytes = admission.max_bytes

    def Insert(self, request_iterator, context):
        """Checks and stores each batch; answers with the receipts once all are stored.

        A batch is checked on the stream's thread and copied into the table on a writer thread
        (numpy copies run without the GIL), so the next message is received meanwhile. A stored
        batch leaves only its wire receipt (a few numbers) to the stream: its arrays, episodes
        and write receipt are let go at once, so a stream's memory stays flat however long.
        """
        timeout = remaining_seconds(context)
        caller = caller_identity(context)
        pending: collections.deque = collections.deque()
        answered: list[pb.WriteReceipt] = []
        frames = 0

        def settle(keep: int) -> None:
            nonlocal frames
            while len(pending) > keep:  # bounds the batches held in memory
                receipt = pending.popleft().result()
                answered.append(receipt_message(receipt))
                frames += receipt.frames

        try:
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-write") as writer:
                for request in request_iterator:
                    checked = self._check(request, caller)
                    self.gate.enter(timeout)
                    pending.append(writer.submit(self._store, request, checked))
                    del request, checked
                    settle(WRITES_AHEAD)
                settle(0)
        except grpc.RpcError:  # cancelled (the client left, or idle); what was stored stays
            return None
        except Exception as err:
            abort_refused(context, err)
        return pb.InsertReply(
            receipts=answered, frames_counted=frames, total_frames=self.gate.total_frames
        )

    def _check(self, request, caller: Caller) -> tuple[str, dict, int]:
        """The route first (a batch for another shard takes no lease here), then admission."""
        if getattr(request, "error", None) is None and request.writer_id:
            owner_shard = shard_of(WRITER_PREFIX + request.writer_id, request.seq, self.num_shards)
            if owner_shard != self.shard_id:
                raise BatchError(
                    f"seq: batch {request.seq} of writer {shown(request.writer_id)} belongs to "
                    f"shard {owner_shard}, not {self.shard_id} (see Experience/GetRoute)"
                )
        return self.admission.check(request, caller)

    def _store(self, request, checked: tuple[str, dict, int]) -> ExternalReceipt:
        writer, arrays, frames = checked
        receipt = None
        try:
            write = self.write(arrays, writer, request.seq)
            fresh = not write.duplicate
            receipt = ExternalReceipt(
                writer_id=request.writer_id,
                seq=request.seq,
                frames=frames if fresh else 0,
                episode_returns=tuple(request.episode_returns) if fresh else (),
                episode_lengths=tuple(request.episode_lengths) if fresh else (),
                write=write,
            )
        finally:
            self.gate.leave(receipt)
        return receipt


def start_intake_server(
    write: Callable, shard_id: int, options: dict, *, node_ip: str
) -> tuple[IntakeGate, grpc.Server, str]:
    """Serves a shard's direct writes; returns its gate, server and the address clients dial.

    Args:
        write: Stores ``(arrays, writer, seq)`` in the shard's table.
        shard_id: The shard's index.
        options: ``spec``, ``num_shards``, ``host``, ``operator``/``actor`` (credentials,
            as the driver sends them their ``env:``/``file:`` references, read here on the
            shard's node), ``tls_files`` (the PEM files' paths, read here) or ``tls``
            (:class:`replay.wire.transport.ServerTls`) or neither, ``max_bytes``,
            ``max_workers``, ``lease_s``, ``frames_per_s``, ``clip_actions``, ``idle_s``,
            ``receive_s``, ``calls_per_peer``, ``published_version``
            (``services.config.grpc.GrpcConfig.shard_intake_options``).

    Keyword Args:
        node_ip: This node's address (bound when ``host`` is not this node's, advertised for
            a wildcard).

    Raises:
        OSError: If no address can be bound.
        ValueError: Naming the field whose secret cannot be read on this node.
    """
    options = served_options(options)  # never in a Ray argument: read here (replay.wire.secrets)
    num_shards = options["num_shards"]
    rate = options.get("frames_per_s")
    # A shard sees a writer's batches in runs of ROUTE_GROUP, one run in every num_shards.
    leases = WriterLeases(
        lease_s=options.get("lease_s", 300.0),
        window=SEQ_WINDOW + ROUTE_GROUP * num_shards,
        frames_per_s=rate / num_shards if rate else None,
    )
    gate = IntakeGate()
    gate.published_version = options.get("published_version", 0)
    admission = Admission(
        options["spec"],
        leases,
        max_bytes=options["max_bytes"],
        clip_actions=options.get("clip_actions", False),
        max_version=gate.max_version,
    )
    servicer = ShardInsertServicer(write, gate, admission, shard_id=shard_id, num_shards=num_shards)
    operator, actor = options.get("operator"), options.get("actor")
    server, planes = make_server(
        max_workers=options["max_workers"],
        max_bytes=options["max_bytes"],
        operator=operator,
        actor=actor,
        receive_s=options.get("receive_s", RECEIVE_S),
        calls_per_peer=options.get("calls_per_peer"),
        thread_name="intake",
    )
    slots = StreamSlots(
        insert_streams(options["max_workers"]), options.get("idle_s"), watchdog=planes.watchdog
    )
    server.add_generic_rpc_handlers((experience_handler(servicer, ("Insert",), slots=slots),))
    port, advertise = _bind(server, options["host"], options.get("tls"), node_ip)
    server.start()
    shown = f"[{advertise}]" if ":" in advertise else advertise
    return gate, server, f"{shown}:{port}"


def _bind(server: grpc.Server, host: str, tls, node_ip: str) -> tuple[int, str]:
    """Binds ``host`` (a wildcard: advertising ``node_ip``), else ``node_ip`` of its family."""
    if host in WILDCARDS:
        port = bind(server, host or "0.0.0.0", 0, tls)
        advertise = _reachable(node_ip)
    else:
        port, advertise = bind(server, host, 0, tls), host
        if port == 0 and _same_family(host, node_ip):  # the address is another node's
            port, advertise = bind(server, node_ip, 0, tls), node_ip
    if port == 0:
        raise OSError(f"grpc.host: a replay shard cannot bind {host} (nor {node_ip})")
    return port, advertise


def _reachable(node_ip: str) -> str:
    """The address clients on other machines dial for a shard bound to a wildcard.

    ``node_ip``, or this host's routable address where it is loopback (an embedded Ray's node,
    ``replay.local_ray.loopback_node``).
    """
    try:
        if not ipaddress.ip_address(node_ip).is_loopback:
            return node_ip
    except ValueError:
        return node_ip
    from ray._common.network_utils import node_ip_address_from_perspective

    return node_ip_address_from_perspective()


def _same_family(host: str, node_ip: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == ipaddress.ip_address(node_ip).version
    except ValueError:  # a host name: its node's address is the shard's best guess
        return True
