"""The driver's gRPC server: operator control and experience from actors outside Ray.

Started by ``python -m services.train`` when ``grpc.port`` is set. It serves
``relayrl.v1.Control`` (``services/grpc/control.proto``) and ``relayrl.v1.Experience``
(``replay/wire/experience.proto``), gRPC
health checking (``grpc.health.v1.Health``: SERVING while the run is running, NOT_SERVING
before and from the moment it starts stopping) and server reflection.

Security (``docs/grpc.md#security``): the server binds to loopback unless ``grpc.host`` says
otherwise; beyond loopback the config must name an operator credential and TLS files (or
``grpc.allow_plaintext``), or it is refused before anything starts. With credentials every call
but health checks must carry ``authorization: Bearer <secret>`` metadata
(:class:`replay.wire.auth.ScopedAuth`: the operator's ``grpc.token`` for everything, the actor's
``grpc.actor_token`` for experience and status), and a call without one is refused before its
body is read; operator calls, health checks and experience are served on threads of their own
(:mod:`replay.wire.planes`), so no caller can starve the operator; writer ids are leased to
their callers (:mod:`replay.wire.leases`).

Examples:
    >>> server = GrpcServer(config.grpc, controller.inbox, spec=spec)  # doctest: +SKIP
    >>> server.attach(controller)  # health follows the run  # doctest: +SKIP
    >>> controller.run(); server.stop()  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
from typing import Protocol

from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from replay.wire import experience_pb2 as pb
from replay.wire.batches import TransitionSpec
from replay.wire.heap import keep_freed_memory
from replay.wire.leases import WriterLeases
from replay.wire.service import Admission, experience_handler
from replay.wire.transport import StreamSlots, bind, insert_streams, make_server
from services.config.grpc import REDACTED, GrpcConfig, redact_secrets
from services.driver.inbox import Inbox
from services.driver.views import InboxView
from services.grpc import control_pb2 as control_pb
from services.grpc import control_pb2_grpc as control_grpc
from services.grpc.servicers import ControlServicer, ExperienceServicer
from services.grpc.spill import SpilledSecrets

logger = logging.getLogger(__name__)

SERVICES = tuple(
    service.full_name
    for module in (control_pb, pb)
    for service in module.DESCRIPTOR.services_by_name.values()
)
HEALTH_SERVICE = health.SERVICE_NAME


class ServedRun(InboxView, Protocol):
    """A run the gRPC server serves: its inbox, and what the inbox reads."""

    inbox: Inbox


def redacted_config(config: dict) -> dict:
    """The run config as ``GetStatus`` returns it: secrets, and where they live, hidden.

    Literal secrets never leave the server; neither do their references (``env:NAME``,
    ``file:PATH``), the TLS files' paths or the checkpoint signing key's: an actor credential
    may read the status, and none of them is an actor's business.

    Examples:
        >>> redacted_config({"grpc": {"token": "file:/etc/t", "tls": {"key_file": "k.pem"}}})
        {'grpc': {'token': '<redacted>', 'tls': {'key_file': '<redacted>'}}}
    """
    out = {**config, "grpc": redact_secrets(config.get("grpc", {}))}
    grpc = out["grpc"]
    for field in ("token", "actor_token"):
        if grpc.get(field):
            grpc[field] = REDACTED
    if isinstance(grpc.get("tls"), dict):
        grpc["tls"] = {k: REDACTED if v else v for k, v in grpc["tls"].items()}
    if isinstance(out.get("checkpoint"), dict) and out["checkpoint"].get("signing_key"):
        out["checkpoint"] = {**out["checkpoint"], "signing_key": REDACTED}
    return out


# What an external actor reads of the run's config: the env to build, its rollout settings and
# the network's shape (a recurrent run's: its core and sequences); nothing else (env_kwargs may
# carry an env's own secrets).
ACTOR_FIELDS = {
    "collector": ("env_id", "n_step", "gamma"),
    "learner": ("hidden_sizes", "recurrent", "recurrent_hidden_size", "dueling"),
    "replay": ("sequence_length", "sequence_overlap", "burn_in"),
}


def actor_config(config: dict) -> dict:
    """The run config as ``GetStatus`` returns it to the actor credential (:data:`ACTOR_FIELDS`).

    Examples:
        >>> actor_config({"collector": {"env_id": "CartPole-v1", "env_kwargs": {"key": "k"}}})
        {'collector': {'env_id': 'CartPole-v1'}, 'learner': {}, 'replay': {}}
    """
    return {
        section: {k: config[section][k] for k in fields if k in config.get(section, {})}
        for section, fields in ACTOR_FIELDS.items()
    }


class GrpcServer:
    """The server, started on construction.

    Args:
        config: The ``grpc`` section (port, host, token, limits).
        inbox: The controller's inbox (``controller.inbox``).

    Keyword Args:
        spec: The run's transition spec (batches are checked against it).
        run_name: Reported by ``GetStatus``.
        run_config: The run's config dict (reported by ``GetStatus``, token redacted).
    """

    def __init__(
        self,
        config: GrpcConfig,
        inbox: Inbox,
        *,
        spec: TransitionSpec,
        run_name: str = "relayrl",
        run_config: dict | None = None,
    ) -> None:
        self.config = config
        self.inbox = inbox
        self.spilled: SpilledSecrets | None = (
            None  # the literal secrets' files for the shards (direct writes)
        )
        options = config.server_options()  # reads the secrets and the TLS files now
        keep_freed_memory()  # every batch arrives in fresh megabytes (see replay.wire.heap)
        operator, actor = options["operator"], options["actor"]
        self.server, self.planes = make_server(
            max_workers=config.max_workers,
            max_bytes=config.max_message_bytes,
            operator=operator,
            actor=actor,
            receive_s=config.receive_timeout_s,
            calls_per_peer=config.calls_per_peer,
        )
        config_json = json.dumps(redacted_config(run_config or {}))
        actor_json = json.dumps(actor_config(run_config or {}))
        control_grpc.add_ControlServicer_to_server(
            ControlServicer(inbox, run_name, config_json, actor_json, operator=operator),
            self.server,
        )
        leases = WriterLeases(
            lease_s=config.writer_lease_s, frames_per_s=config.writer_frames_per_s
        )
        admission = Admission(
            spec,
            leases,
            max_bytes=config.max_message_bytes,
            clip_actions=config.clip_actions,
            max_version=lambda named: inbox.published_version,
        )
        self.experience = ExperienceServicer(
            inbox,
            admission,
            inflight_writes=config.inflight_writes,
            shared_bytes=int(config.shared_memory_mb * (1 << 20)),
        )
        self.slots = StreamSlots(
            insert_streams(config.max_workers), config.stream_idle_s, watchdog=self.planes.watchdog
        )
        self.server.add_generic_rpc_handlers(
            (experience_handler(self.experience, slots=self.slots),)
        )
        self.health = health.HealthServicer(experimental_non_blocking=True)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self._set_health(serving=False)
        reflection.enable_server_reflection((*SERVICES, HEALTH_SERVICE, reflection.SERVICE_NAME),
                                            self.server)  # fmt: skip
        host = f"[{config.host}]" if ":" in config.host else config.host
        assert config.port is not None  # a server is started for grpc.port only
        self.port = bind(self.server, config.host, config.port, options["tls"])
        if self.port == 0:
            raise OSError(f"grpc.port: cannot bind {host}:{config.port}")
        self.address = f"{host}:{self.port}"
        self.server.start()
        inbox.on_state = self._on_state
        logger.info(
            "gRPC server at %s (%s; %s; credentials: %s)",
            self.address,
            ", ".join(SERVICES),
            ("mutual TLS" if config.tls.client_ca_file else "TLS")
            if config.tls.enabled
            else "plaintext",
            ("operator and actor" if actor else "operator") if operator else "none",
        )

    def attach(self, controller: InboxView) -> None:
        """Serves ``controller``: its inbox goes live; health follows the run's state."""
        self.inbox.enable(controller)
        if self.config.direct_writes:
            controller.register("setup", self._start_direct)

    def _start_direct(self, controller: InboxView) -> None:
        """Starts the shards' Insert servers once the run's shards exist."""
        if self.inbox.refusal is not None:
            return
        from services.grpc.direct import DirectWrites

        # The shards get references to the secrets, never the secrets (services.grpc.spill).
        self.spilled = SpilledSecrets(self.config)
        options = {
            **self.config.shard_intake_options(self.spilled.refs),
            "spec": self.experience.spec,
        }
        options["published_version"] = self.inbox.published_version
        direct = DirectWrites(controller.shards, options)
        self.inbox.attach_direct(direct)
        logger.info("gRPC direct writes: replay shards at %s", ", ".join(direct.addresses))

    def _on_state(self, state: str) -> None:
        self._set_health(serving=state == "running")

    def _set_health(self, *, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("", *SERVICES):
            self.health.set(service, status)

    def stop(self) -> None:
        """Health goes NOT_SERVING, then in-flight calls get ``grpc.grace_s`` to finish."""
        self.health.enter_graceful_shutdown()
        self.server.stop(self.config.grace_s).wait(self.config.grace_s + 1.0)
        self.planes.close()
        self.experience.close()
        if self.spilled is not None:
            self.spilled.close()
        logger.info("gRPC server at %s stopped", self.address)


def serve_run(config, controller: ServedRun) -> GrpcServer | None:
    """Starts the run's gRPC server when ``grpc.port`` is set and attaches it to ``controller``.

    Args:
        config: The run's ``RunConfig``.
        controller: The run (the controller): its inbox goes live.

    Returns:
        The started server, or None when ``grpc.port`` is null.

    Raises:
        OSError: Naming ``grpc.port`` when the address cannot be bound.
    """
    if not config.grpc.enabled:
        return None
    from services.grpc.transitions import run_spec

    spec = run_spec(config)  # transitions, or the run's sequences (replay.sequence_length)
    server = GrpcServer(
        config.grpc,
        controller.inbox,
        spec=spec,
        run_name=config.run.name,
        run_config=config.to_dict(),
    )
    server.attach(controller)
    logger.info("gRPC transition spec: %s", spec.describe())
    return server
