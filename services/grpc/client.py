"""A Python client of the driver's gRPC server, for operators and actors outside Ray.

Examples:
    >>> client = RelayClient("127.0.0.1:50051", token="s3cret")  # doctest: +SKIP
    >>> client.status().frames  # doctest: +SKIP
    >>> weights = client.get_weights()  # newest weights, or None if not newer  # doctest: +SKIP
    >>> network.load_state_dict(weights.state_dict)  # doctest: +SKIP
    >>> reply = client.insert([transitions])  # dicts of arrays: one stream  # doctest: +SKIP
    >>> reply.frames_counted, [r.shard_id for r in reply.receipts]  # doctest: +SKIP
    >>> client.checkpoint()  # path of a consistent checkpoint  # doctest: +SKIP
    >>> client.stop()  # clean stop; path of the final checkpoint  # doctest: +SKIP

Retries: every batch carries ``(writer_id, seq)``; the client numbers them 0, 1, 2, ... A batch
sent again with the same writer id and ``seq`` (e.g. after UNAVAILABLE) is acknowledged, not
stored twice. A restarted actor that starts again at 0 with a new client (so a new lease) is a
new writer; one that keeps its ``lease`` must go on from its last ``seq``, or its batches would
be taken for retries.

Leases: a writer id is scoped to the client that writes with it (``replay.wire.leases``): each
client sends a random lease id (``x-relayrl-lease`` metadata) with its credential, and its
batches are stored as its own writer; another client (another lease) using the same writer id
writes a writer of its own and cannot make this one's batches pass for retries. A restarted
actor is served at once; pass the same ``lease`` to a client that takes over a writer id with
its dedup state.

TLS: with ``ca_file`` (the CA that signed the server's certificate) the channels are encrypted;
with ``cert_file`` and ``key_file`` too, the client presents its own certificate (mutual TLS,
``grpc.tls.client_ca_file``). ``server_name`` overrides the name checked against the server's
certificate (e.g. when dialing an IP address the certificate does not name).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
import socket
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from replay.wire import experience_pb2 as pb
from replay.wire import experience_pb2_grpc as pb_grpc
from replay.wire.auth import LEASE_METADATA
from replay.wire.batches import WRITER_PREFIX, shard_of
from replay.wire.codecs import decode_state_dict, encode_arrays
from services.grpc import control_pb2 as control_pb
from services.grpc import control_pb2_grpc as control_grpc


@dataclasses.dataclass(frozen=True)
class Weights:
    """Published policy weights fetched over gRPC.

    Attributes:
        generation: Learner generation that produced them.
        version: Model version (optimizer steps in the lineage).
        state_dict: Parameter name to CPU tensor, ready for ``load_state_dict``.
    """

    generation: int
    version: int
    state_dict: dict

    @property
    def key(self) -> tuple[int, int]:
        """``(generation, version)``: the order of publications."""
        return self.generation, self.version


def default_writer_id() -> str:
    """``<host>-<pid>-<random>``: unique per client process."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def channel_credentials(
    ca_file: str | None, cert_file: str | None = None, key_file: str | None = None
) -> grpc.ChannelCredentials | None:
    """TLS credentials from PEM files (None without ``ca_file``: plaintext).

    Raises:
        ValueError: For ``cert_file`` without ``key_file`` (or the reverse) or without
            ``ca_file``.
    """
    if (cert_file is None) != (key_file is None):
        raise ValueError("cert_file and key_file: give both for mutual TLS, or neither")
    if ca_file is None:
        if cert_file is not None:
            raise ValueError("ca_file: mutual TLS needs the server's CA too")
        return None

    def read(path: str | None) -> bytes | None:
        return Path(path).expanduser().read_bytes() if path else None

    return grpc.ssl_channel_credentials(
        root_certificates=read(ca_file),
        private_key=read(key_file),
        certificate_chain=read(cert_file),
    )


class RelayClient:
    """Calls ``relayrl.v1.Control`` and ``relayrl.v1.Experience`` on one channel.

    Args:
        address: ``host:port`` of the run's gRPC server (logged by the run at start).

    Keyword Args:
        token: The run's ``grpc.token`` (operator) or ``grpc.actor_token`` (actor), sent as
            ``authorization: Bearer <token>``.
        writer_id: This client's writer id (default: :func:`default_writer_id`).
        max_message_mb: Message size limit of the channel.
        timeout: Seconds each call may take.
        ca_file: PEM CA of the server's certificate: TLS (None: plaintext).
        cert_file: PEM certificate of this client (mutual TLS; with ``key_file``).
        key_file: PEM private key of ``cert_file``.
        server_name: The name to check the server's certificate against (default: the host
            of the address dialed).
        lease: The lease id this client's writes carry (default: a random one).
    """

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        writer_id: str | None = None,
        max_message_mb: float = 256.0,
        timeout: float = 120.0,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        server_name: str | None = None,
        lease: str | None = None,
    ) -> None:
        limit = int(max_message_mb * (1 << 20))
        self.channel_options: list[tuple[str, int | str]] = [
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
        ]
        if server_name:
            self.channel_options.append(("grpc.ssl_target_name_override", server_name))
        self.credentials = channel_credentials(ca_file, cert_file, key_file)
        self.channel = self._channel(address)
        self.control = control_grpc.ControlStub(self.channel)
        self.experience = pb_grpc.ExperienceStub(self.channel)
        self.health_stub = health_pb2_grpc.HealthStub(self.channel)
        self.lease = lease or uuid.uuid4().hex
        self.metadata: tuple[tuple[str, str], ...] = ((LEASE_METADATA, self.lease),)
        if token:
            self.metadata = (("authorization", f"Bearer {token}"), *self.metadata)
        self.writer_id = writer_id or default_writer_id()
        self.timeout = timeout
        self.seq = 0
        self.shard_stubs: dict[str, tuple[grpc.Channel, pb_grpc.ExperienceStub]] = {}
        self._route: pb.Route | None = None

    def _channel(self, address: str) -> grpc.Channel:
        if self.credentials is None:
            return grpc.insecure_channel(address, options=self.channel_options)
        return grpc.secure_channel(address, self.credentials, options=self.channel_options)

    def __enter__(self) -> RelayClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Closes the channels."""
        self.channel.close()
        for channel, _ in self.shard_stubs.values():
            channel.close()
        self.shard_stubs = {}

    # -- control -----------------------------------------------------------------------------
    def status(self) -> control_pb.Status:
        """The run's counters, versions, replay sizes, state and last checkpoint."""
        return self.control.GetStatus(
            control_pb.GetStatusRequest(), metadata=self.metadata, timeout=self.timeout
        )

    def checkpoint(self) -> str:
        """Cuts a consistent checkpoint now; returns its absolute path."""
        reply = self.control.Checkpoint(
            control_pb.CheckpointRequest(), metadata=self.metadata, timeout=self.timeout
        )
        return reply.path

    def stop(self, *, wait: bool = True) -> str:
        """Stops the run cleanly; with ``wait``, returns the final checkpoint's path."""
        reply = self.control.Stop(
            control_pb.StopRequest(wait=wait), metadata=self.metadata, timeout=self.timeout
        )
        return reply.checkpoint

    def scale(
        self,
        *,
        num_collectors: int = 0,
        num_shards: int = 0,
        world_size: int = 0,
        wait: bool = True,
    ) -> control_pb.ScaleReply:
        """Sets the run's sizes live (0 keeps one); with ``wait``, answers once reached."""
        request = control_pb.ScaleRequest(
            num_collectors=num_collectors, num_shards=num_shards, world_size=world_size, wait=wait
        )
        return self.control.Scale(request, metadata=self.metadata, timeout=self.timeout)

    def health(self, service: str = "") -> str:
        """``SERVING``, ``NOT_SERVING``, ... of the server (no token needed)."""
        reply = self.health_stub.Check(
            health_pb2.HealthCheckRequest(service=service), timeout=self.timeout
        )
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)

    def wait_health(self, status: str, *, service: str = "", timeout: float = 120.0) -> None:
        """Blocks until the server reports ``status`` (a health Watch stream, no polling).

        Raises:
            grpc.RpcError: DEADLINE_EXCEEDED after ``timeout`` seconds.
        """
        stream = self.health_stub.Watch(
            health_pb2.HealthCheckRequest(service=service), timeout=timeout
        )
        try:
            for reply in stream:
                if health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status) == status:
                    return
        finally:
            stream.cancel()

    # -- experience --------------------------------------------------------------------------
    def batch(
        self,
        transitions: Mapping[str, np.ndarray],
        *,
        seq: int | None = None,
        episode_returns: Sequence[float] = (),
        episode_lengths: Sequence[int] = (),
    ) -> pb.InsertRequest:
        """One batch message; takes the next sequence number unless ``seq`` is given."""
        if seq is None:
            seq, self.seq = self.seq, self.seq + 1
        tensors = [
            pb.Tensor(key=key, dtype=dtype, shape=shape, data=data)
            for key, dtype, shape, data in encode_arrays(transitions)
        ]
        return pb.InsertRequest(
            writer_id=self.writer_id,
            seq=seq,
            tensors=tensors,
            episode_returns=list(episode_returns),
            episode_lengths=list(episode_lengths),
        )

    def insert(self, batches: Iterable[Mapping[str, np.ndarray] | pb.InsertRequest]):
        """Sends batches on one stream; returns the ``InsertReply`` once they are counted.

        Args:
            batches: Mappings of arrays (numbered by :meth:`batch`) or prepared requests
                (e.g. the same requests again, to retry).

        Raises:
            grpc.RpcError: INVALID_ARGUMENT naming the key of a batch that does not match the
                run's transition spec (nothing of that batch is stored), UNAVAILABLE once the
                run stops taking experience, UNAUTHENTICATED without the right token.
        """
        requests = (b if isinstance(b, pb.InsertRequest) else self.batch(b) for b in batches)
        return self.experience.Insert(requests, metadata=self.metadata, timeout=self.timeout)

    def route(self) -> pb.Route:
        """The replay shards' Insert addresses (empty unless the run has ``grpc.direct_writes``)."""
        return self.experience.GetRoute(
            pb.GetRouteRequest(), metadata=self.metadata, timeout=self.timeout
        )

    def insert_direct(
        self,
        batches: Iterable[Mapping[str, np.ndarray] | pb.InsertRequest],
        *,
        parallel: bool = False,
    ):
        """Sends each batch straight to the replay shard that stores it; one merged reply.

        The route (``Experience/GetRoute``) is fetched once and kept. The batches of each shard
        go on one stream, one shard after the other (``parallel``: all shards' streams at once,
        for a client with cores to spare and shards on several nodes). Without a route (the run
        has no ``grpc.direct_writes``), or for the batches of a shard that cannot be reached
        (it restarted: the route is fetched again next time), the driver's :meth:`insert` takes
        them; a retried ``(writer_id, seq)`` is acknowledged, not stored twice, either way.

        A shard answers once its batches are stored; ``frames_counted`` are the frames it
        stored fresh, which the driver counts at its next loop boundary (``total_frames``: the
        run's count as the shard last heard it).

        Raises:
            grpc.RpcError: As :meth:`insert`.
        """
        requests = [b if isinstance(b, pb.InsertRequest) else self.batch(b) for b in batches]
        if self._route is None:
            self._route = self.route()
        addresses = list(self._route.shard_addresses)
        if not addresses:
            return self.insert(requests)
        groups: dict[int, list[pb.InsertRequest]] = collections.defaultdict(list)
        for request in requests:
            writer = WRITER_PREFIX + request.writer_id
            groups[shard_of(writer, request.seq, len(addresses))].append(request)

        def send(index: int):
            stub = self._shard_stub(addresses[index])
            try:
                return stub.Insert(
                    iter(groups[index]), metadata=self.metadata, timeout=self.timeout
                )
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                return None

        if parallel and len(groups) > 1:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(groups)) as pool:
                answers = list(pool.map(send, groups))
        else:
            answers = [send(index) for index in groups]
        replies = [reply for reply in answers if reply is not None]
        rerouted = [
            request
            for index, reply in zip(groups, answers, strict=True)
            if reply is None
            for request in groups[index]
        ]
        if rerouted:
            self._route = None
            rerouted.sort(key=lambda r: r.seq)
            replies.append(self.insert(rerouted))
        return pb.InsertReply(
            receipts=sorted((r for reply in replies for r in reply.receipts), key=lambda r: r.seq),
            frames_counted=sum(reply.frames_counted for reply in replies),
            total_frames=max(reply.total_frames for reply in replies),
        )

    def _shard_stub(self, address: str) -> pb_grpc.ExperienceStub:
        if address not in self.shard_stubs:
            channel = self._channel(address)
            self.shard_stubs[address] = (channel, pb_grpc.ExperienceStub(channel))
        return self.shard_stubs[address][1]

    def get_weights(self, generation: int = -1, version: int = -1) -> Weights | None:
        """The newest weights if newer than ``(generation, version)``, else None."""
        chunks = self.experience.GetWeights(
            pb.GetWeightsRequest(generation=generation, version=version),
            metadata=self.metadata,
            timeout=self.timeout,
        )
        head = next(chunks)
        if head.not_newer:
            for _ in chunks:  # drain the (empty) rest of the stream
                pass
            return None
        blob = bytearray()
        for chunk in chunks:
            blob += chunk.data
        return Weights(head.generation, head.version, decode_state_dict(head.tensors, blob))
