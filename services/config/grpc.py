"""The ``grpc`` section of the run config: the driver's gRPC server (see ``services.grpc.server``).

``services.config.sections`` composes it into ``RunConfig`` (``--set grpc.port=0``); its errors name
the field like every section's (``grpc.token: required when ...``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names a loopback interface (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True)
class GrpcConfig:
    """The driver's gRPC server: operator control and experience from actors outside Ray.

    Attributes:
        port: Port of the server; None: no server; 0: the OS chooses (the address is logged).
        host: Bind address; loopback unless you mean to expose it (then ``token`` is required).
        token: Clients must send ``authorization: Bearer <token>`` metadata; ``env:NAME`` reads
            the token from environment variable ``NAME`` when the server starts (keeps it out
            of the run's saved config). Required when ``host`` is not loopback.
        max_message_mb: Largest transition batch in MiB (its tensors' bytes); larger batches
            are refused with INVALID_ARGUMENT naming the key. gRPC's own message limit is twice
            this, so such a batch still reaches the check.
        max_workers: Threads serving RPCs (each open Insert stream holds one).
        inflight_writes: Shard calls one Insert stream keeps in flight while it reads on (each
            carries the batches that arrived meanwhile).
        grace_s: Seconds in-flight RPCs get to finish when the server stops.
        shared_memory_mb: Batches over 100 KiB for shards on the driver's node go through a
            pool of shared-memory blocks in ``/dev/shm`` of at most this size instead of Ray's
            object store (``replay.shm``); 0: off.
        direct_writes: Every replay shard also serves ``Experience/Insert`` itself; clients
            that fetch ``Experience/GetRoute`` stream each batch to its shard, skipping the
            driver hop (``replay.intake``). The driver still gates and counts them.
    """

    port: int | None = None
    host: str = "127.0.0.1"
    token: str | None = None
    max_message_mb: float = 64.0
    max_workers: int = 16
    inflight_writes: int = 4
    grace_s: float = 2.0
    shared_memory_mb: float = 256.0
    direct_writes: bool = False

    def __post_init__(self) -> None:
        checks = [
            (
                self.port is None or 0 <= self.port < 65536,
                "port",
                "must be in [0, 65535] or null (off)",
                self.port,
            ),
            (bool(self.host), "host", "must be a non-empty address", self.host),
            (self.token is None or bool(self.token), "token", "must be non-empty", self.token),
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
        ]
        for ok, field, rule, value in checks:
            if not ok:
                raise ValueError(f"{field}: {rule}, got {value!r}")
        if self.port is not None and self.token is None and not is_loopback(self.host):
            raise ValueError(
                f"token: required when the server binds beyond loopback (host={self.host!r}); "
                "set grpc.token (or grpc.host=127.0.0.1)"
            )
        env = self.token[4:] if self.token and self.token.startswith("env:") else None
        if self.port is not None and env is not None and not os.environ.get(env):
            raise ValueError(f"token: environment variable {env} is unset or empty")

    @property
    def enabled(self) -> bool:
        """Whether the run serves gRPC."""
        return self.port is not None

    @property
    def max_message_bytes(self) -> int:
        """The batch size limit in bytes."""
        return int(self.max_message_mb * (1 << 20))

    def shard_intake_options(self) -> dict:
        """Where and how replay shards serve direct writes (see ``ReplayShard.start_intake``).

        On loopback they bind the same host; beyond it every interface, advertising their
        node's IP.
        """
        loopback = is_loopback(self.host)
        return {
            "host": self.host if loopback else ("::" if ":" in self.host else "0.0.0.0"),
            "advertise": self.host if loopback else None,
            "token": self.resolved_token(),
            "max_bytes": self.max_message_bytes,
            "max_workers": self.max_workers,
        }

    def resolved_token(self) -> str | None:
        """The token clients must send (read from the environment for ``env:NAME``)."""
        if self.token and self.token.startswith("env:"):
            return os.environ[self.token[4:]]
        return self.token
