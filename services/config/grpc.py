"""The ``grpc`` section of the run config: the driver's gRPC server (see ``services.grpc.server``).

``services.config.sections`` composes it into ``RunConfig`` (``--set grpc.port=0``); its errors name
the field like every section's (``grpc.token: required when ...``), the nested ``tls`` section's
with its path (``grpc.tls.cert_file: ...``).

Secrets (``token``, ``actor_token``) are references, ``env:NAME`` (an environment variable) or
``file:PATH`` (a file's first line), resolved when the server starts; a literal secret is
accepted only while the server binds loopback, and :func:`redact_secrets` hides it from
everything the run writes (``config.yaml``, checkpoints, ``GetStatus``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from replay.wire.secrets import is_reference, resolve_secret

if TYPE_CHECKING:
    from replay.wire.transport import ServerTls

__all__ = ["GrpcConfig", "TlsConfig", "is_reference", "redact_secrets", "resolve_secret"]

LOOPBACK_NAMES = ("localhost",)
REDACTED = "<redacted>"
SECRET_FIELDS = ("token", "actor_token")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names a loopback interface (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def redact_secrets(section: dict) -> dict:
    """A ``grpc`` section dict with literal secrets replaced by ``<redacted>``.

    Examples:
        >>> redact_secrets({"token": "s3cret", "actor_token": "env:ACTOR"})
        {'token': '<redacted>', 'actor_token': 'env:ACTOR'}
    """
    out = dict(section)
    for field in SECRET_FIELDS:
        if out.get(field) and not is_reference(str(out[field])):
            out[field] = REDACTED
    return out


@dataclasses.dataclass(frozen=True)
class TlsConfig:
    """TLS on every listener of the run (the driver's server and the shards' direct writes).

    Attributes:
        cert_file: PEM certificate chain the servers present (its names or IPs must match the
            address clients dial).
        key_file: PEM private key of ``cert_file``.
        client_ca_file: PEM CA: clients must present a certificate it signed (mutual TLS);
            None: any client may connect (and authenticates with a token).
    """

    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            missing = "key_file" if self.key_file is None else "cert_file"
            raise ValueError(f"{missing}: cert_file and key_file go together, got only one")
        if self.client_ca_file is not None and self.cert_file is None:
            raise ValueError("client_ca_file: mutual TLS needs cert_file and key_file too")

    @property
    def enabled(self) -> bool:
        """Whether the servers listen with TLS."""
        return self.cert_file is not None

    def check_files(self) -> None:
        """Refuses a file that cannot be read (naming the field).

        Raises:
            ValueError: ``<field>: cannot read <path>: ...``.
        """
        for field in ("cert_file", "key_file", "client_ca_file"):
            path = getattr(self, field)
            if path is None:
                continue
            try:
                Path(path).expanduser().read_bytes()
            except OSError as err:
                raise ValueError(f"{field}: cannot read {path}: {err.strerror}") from None

    def server_tls(self) -> ServerTls | None:
        """The PEM material (None without TLS)."""
        from replay.wire.transport import ServerTls  # grpc: imported when a server starts

        if not self.enabled:
            return None
        ca = self.client_ca_file
        return ServerTls.from_files(
            str(Path(self.cert_file).expanduser()),
            str(Path(self.key_file).expanduser()),
            str(Path(ca).expanduser()) if ca else None,
        )


@dataclasses.dataclass(frozen=True)
class GrpcConfig:
    """The driver's gRPC server: operator control and experience from actors outside Ray.

    Attributes:
        port: Port of the server; None: no server; 0: the OS chooses (the address is logged).
        host: Bind address of the server and of the shards' direct writes; loopback unless you
            mean to expose it (then ``token`` and TLS, or ``allow_plaintext``, are required).
        token: The operator credential: clients send ``authorization: Bearer <token>``
            metadata and may call everything. ``env:NAME`` or ``file:PATH`` names where the
            secret lives (read when the server starts); a literal secret is accepted only on
            loopback and is never written anywhere (``<redacted>``). Required beyond loopback.
        actor_token: The actor credential (same forms): external actors may call Insert,
            GetWeights, GetRoute and GetStatus with it, nothing else (PERMISSION_DENIED).
            Needs ``token``.
        tls: TLS files (``grpc.tls.cert_file``, ``key_file``, ``client_ca_file``).
        allow_plaintext: Serve without TLS beyond loopback (on a network you trust).
        max_message_mb: Largest transition batch in MiB (its tensors' bytes); larger batches
            are refused with INVALID_ARGUMENT naming the key. gRPC's own message limit is twice
            this, so such a batch still reaches the check.
        max_workers: Threads serving RPCs; each open Insert stream holds one, and at most
            ``max_workers - 4`` (at least half) Insert streams run at once, so Control calls
            are answered while the Insert capacity is taken.
        inflight_writes: Shard calls one Insert stream keeps in flight while it reads on (each
            carries the batches that arrived meanwhile).
        grace_s: Seconds in-flight RPCs get to finish when the server stops.
        shared_memory_mb: Batches over 100 KiB for shards on the driver's node go through a
            pool of shared-memory blocks in ``/dev/shm`` of at most this size instead of Ray's
            object store (``replay.shm``); 0: off.
        direct_writes: Every replay shard also serves ``Experience/Insert`` itself; clients
            that fetch ``Experience/GetRoute`` stream each batch to its shard, skipping the
            driver hop (``replay.intake``). The driver still gates and counts them.
        writer_frames_per_s: Frames per second each writer id may insert (RESOURCE_EXHAUSTED
            beyond; a burst of one second's worth); None: no limit.
        writer_lease_s: Seconds a writer's lease (its ``seq`` window and rate) outlives its
            last write (``replay.wire.leases``; writer ids are scoped to their caller).
        clip_actions: Clip Box actions into the action space instead of refusing batches
            whose actions lie outside it.
        stream_idle_s: An Insert stream that sends nothing for this many seconds is cancelled
            (its thread freed); None: never.
        receive_timeout_s: A unary call whose request has not arrived after this many seconds
            is cancelled (its thread freed).
        calls_per_peer: Experience calls (Insert streams included) one peer address may have
            in flight (RESOURCE_EXHAUSTED beyond); None: half of ``max_workers``.
        external_returns_steer: External actors' episode returns join the running mean that
            drives ``controller.stop_return``, milestones, early stopping and keep-best; by
            default they are reported apart (``external_return_mean``) and steer nothing
            (an actor credential could otherwise stop the run with made-up returns).
    """

    port: int | None = None
    host: str = "127.0.0.1"
    token: str | None = dataclasses.field(default=None, repr=False)  # never printed
    actor_token: str | None = dataclasses.field(default=None, repr=False)
    tls: TlsConfig = dataclasses.field(default_factory=TlsConfig)
    allow_plaintext: bool = False
    max_message_mb: float = 64.0
    max_workers: int = 16
    inflight_writes: int = 4
    grace_s: float = 2.0
    shared_memory_mb: float = 256.0
    direct_writes: bool = False
    writer_frames_per_s: float | None = None
    writer_lease_s: float = 300.0
    clip_actions: bool = False
    stream_idle_s: float | None = 60.0
    receive_timeout_s: float = 10.0
    calls_per_peer: int | None = None
    external_returns_steer: bool = False

    def __post_init__(self) -> None:
        checks = [
            (
                self.port is None or 0 <= self.port < 65536,
                "port",
                "must be in [0, 65535] or null (off)",
                self.port,
            ),
            (bool(self.host), "host", "must be a non-empty address", self.host),
            (self.max_message_mb > 0, "max_message_mb", "must be > 0", self.max_message_mb),
            (self.max_workers >= 2, "max_workers", "must be >= 2", self.max_workers),
            (self.inflight_writes >= 1, "inflight_writes", "must be >= 1", self.inflight_writes),
            (self.grace_s >= 0, "grace_s", "must be >= 0", self.grace_s),
            (
                self.shared_memory_mb >= 0,
                "shared_memory_mb",
                "must be >= 0",
                self.shared_memory_mb,
            ),
            (
                not self.direct_writes or self.port is not None,
                "direct_writes",
                "needs the gRPC server (set grpc.port)",
                self.direct_writes,
            ),
            (
                self.writer_frames_per_s is None or self.writer_frames_per_s > 0,
                "writer_frames_per_s",
                "must be > 0 or null (no limit)",
                self.writer_frames_per_s,
            ),
            (self.writer_lease_s > 0, "writer_lease_s", "must be > 0", self.writer_lease_s),
            (
                self.stream_idle_s is None or self.stream_idle_s > 0,
                "stream_idle_s",
                "must be > 0 or null (never)",
                self.stream_idle_s,
            ),
            (
                self.receive_timeout_s > 0,
                "receive_timeout_s",
                "must be > 0",
                self.receive_timeout_s,
            ),
            (
                self.calls_per_peer is None or self.calls_per_peer >= 1,
                "calls_per_peer",
                "must be >= 1 or null (half of max_workers)",
                self.calls_per_peer,
            ),
        ]
        for ok, field, rule, value in checks:
            if not ok:
                raise ValueError(f"{field}: {rule}, got {value!r}")
        self._check_secrets()
        if self.enabled:
            self._check_exposure()

    def _check_secrets(self) -> None:
        loopback = is_loopback(self.host)
        for field in SECRET_FIELDS:
            secret = getattr(self, field)
            if secret is None:
                continue
            if not secret:
                raise ValueError(f"{field}: must be non-empty, got ''")
            if secret == REDACTED:
                raise ValueError(
                    f"{field}: {REDACTED} stands for a secret that was never written; set it "
                    "again (env:NAME or file:PATH)"
                )
            if not is_reference(secret) and not loopback:
                raise ValueError(
                    f"{field}: a literal secret is accepted only on loopback "
                    f"(host={self.host!r}); use env:NAME or file:PATH"
                )
        if self.actor_token is not None and self.token is None:
            raise ValueError("actor_token: needs grpc.token (the operator credential) too")
        if self.enabled:
            operator = resolve_secret("token", self.token)
            actor = resolve_secret("actor_token", self.actor_token)
            if actor is not None and actor == operator:
                raise ValueError("actor_token: must differ from grpc.token")

    def _check_exposure(self) -> None:
        if self.tls.enabled:
            try:
                self.tls.check_files()
            except ValueError as err:
                raise ValueError(f"tls.{err}") from None
        if is_loopback(self.host):
            return
        if self.token is None:
            raise ValueError(
                f"token: required when the server binds beyond loopback (host={self.host!r}); "
                "set grpc.token (or grpc.host=127.0.0.1)"
            )
        if not self.tls.enabled and not self.allow_plaintext:
            raise ValueError(
                f"tls: required when the server binds beyond loopback (host={self.host!r}): set "
                "grpc.tls.cert_file and grpc.tls.key_file, or grpc.allow_plaintext: true"
            )

    @property
    def enabled(self) -> bool:
        """Whether the run serves gRPC."""
        return self.port is not None

    @property
    def max_message_bytes(self) -> int:
        """The batch size limit in bytes."""
        return int(self.max_message_mb * (1 << 20))

    def resolved_token(self) -> str | None:
        """The operator secret clients must send (read from its reference when it is one)."""
        return resolve_secret("token", self.token)

    def resolved_actor_token(self) -> str | None:
        """The actor secret (read from its reference when it is one)."""
        return resolve_secret("actor_token", self.actor_token)

    def server_options(self, *, resolve: bool = True) -> dict:
        """What both kinds of server need: credentials, TLS, limits, leases.

        The secrets and the TLS material are read here, when a server starts (``resolve``
        False: the limits alone, for :meth:`shard_intake_options`).
        """
        limits = {
            "max_bytes": self.max_message_bytes,
            "max_workers": self.max_workers,
            "lease_s": self.writer_lease_s,
            "frames_per_s": self.writer_frames_per_s,
            "clip_actions": self.clip_actions,
            "idle_s": self.stream_idle_s,
            "receive_s": self.receive_timeout_s,
            "calls_per_peer": self.calls_per_peer,
        }
        if not resolve:
            return limits
        return {
            "operator": self.resolved_token(),
            "actor": self.resolved_actor_token(),
            "tls": self.tls.server_tls(),
            **limits,
        }

    def shard_intake_options(self, spilled: Mapping[str, str] | None = None) -> dict:
        """Where and how replay shards serve direct writes (see ``ReplayShard.start_intake``).

        Each shard binds ``grpc.host`` where its node has that address, else its node's own
        IP of the same family (never every interface unless ``host`` is a wildcard), and
        advertises the address it bound (a wildcard: its node's IP).

        The options travel as Ray call arguments, so they carry no secret: the credentials
        as their ``env:``/``file:`` references and TLS as its files' paths, which each shard
        reads on its own node (``replay.wire.secrets.served_options``). A literal secret
        (loopback only) goes as the ``file:`` reference ``spilled`` maps its field to (a
        private file the driver wrote, ``services.grpc.spill``).

        Args:
            spilled: ``{"token" | "actor_token": "file:PATH"}`` for literal secrets.

        Raises:
            ValueError: A literal secret that ``spilled`` does not name.

        Examples:
            >>> config = GrpcConfig(token="env:OPERATOR", tls=TlsConfig("c", "k"))
            >>> options = config.shard_intake_options()
            >>> options["operator"], options["actor"], options["tls_files"]
            ('env:OPERATOR', None, ('c', 'k', None))
        """
        spilled = spilled or {}
        refs = {}
        for option, field in (("operator", "token"), ("actor", "actor_token")):
            secret = getattr(self, field)
            if secret is not None and not is_reference(secret):
                if field not in spilled:
                    raise ValueError(f"{field}: a literal secret is never sent to a shard")
                secret = spilled[field]
            refs[option] = secret
        tls = self.tls
        files = None
        if tls.enabled:
            files = tuple(
                str(Path(p).expanduser()) if p else None
                for p in (tls.cert_file, tls.key_file, tls.client_ca_file)
            )
        return {**self.server_options(resolve=False), **refs, "tls_files": files, "host": self.host}
