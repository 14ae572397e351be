"""The servicers behind the driver's gRPC server: ``relayrl.v1.Control`` and ``Experience``.

Both run on gRPC server threads and reach the driver only through its
:class:`services.driver.inbox.Inbox`; replay writes go from here straight to the shards
(``services.grpc.insert``: coalesced shard calls, shared memory on the driver's node), weights
come from the object store.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import logging
import threading
import time

import grpc
import ray

from replay.wire import experience_pb2 as pb
from replay.wire import experience_pb2_grpc as pb_grpc
from replay.wire.auth import caller_identity
from replay.wire.codecs import encode_state_dict
from replay.wire.service import (
    Admission,
    IntakeClosed,
    abort_refused,
    remaining_seconds,
)
from services.config import ConfigError
from services.driver.inbox import Inbox
from services.grpc import control_pb2 as control_pb
from services.grpc import control_pb2_grpc as control_grpc
from services.grpc.insert import InsertStream, Pending, ReplayRoute

logger = logging.getLogger(__name__)

WEIGHTS_CHUNK_BYTES = 1 << 20


class ControlServicer(control_grpc.ControlServicer):
    """``GetStatus``, ``Checkpoint``, ``Stop``, ``Scale``.

    Args:
        inbox: The driver's inbox.
        run_name: The run's name.
        config_json: The run's config as JSON, its secrets hidden (the operator's view).
        actor_json: What of it the actor credential sees (``services.grpc.server.actor_config``).

    Keyword Args:
        operator: The operator secret; a caller that does not send it gets ``actor_json``
            (None: no credential is configured, every caller is the operator).
    """

    def __init__(
        self,
        inbox: Inbox,
        run_name: str,
        config_json: str,
        actor_json: str = "{}",
        *,
        operator: str | None = None,
    ) -> None:
        self.inbox = inbox
        self.run_name = run_name
        self.config_json = config_json
        self.actor_json = actor_json
        self.operator = f"Bearer {operator}".encode() if operator else None

    def _config_for(self, context) -> str:
        """The config view of the caller's credential."""
        if self.operator is None:
            return self.config_json
        given = str(dict(context.invocation_metadata() or ()).get("authorization", ""))
        operator = hmac.compare_digest(given.encode(), self.operator)
        return self.config_json if operator else self.actor_json

    def GetStatus(self, request, context):
        """Counters as of the driver's last loop boundary, replay sizes asked of the shards now."""
        status = dict(self.inbox.status)
        shards = []
        if self.inbox.shards and self.inbox.state in ("running", "stopping"):
            try:
                stats = ray.get([s.stats.remote() for s in self.inbox.shards], timeout=30)
            except (ray.exceptions.RayError, TimeoutError) as err:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"replay shards did not answer: {err}")
            shards = [
                control_pb.ShardStatus(
                    shard_id=s["shard_id"],
                    size=s["size"],
                    capacity=s["capacity"],
                    write_count=s["write_count"],
                )
                for s in stats
            ]
        return control_pb.Status(
            run_name=self.run_name,
            state=self.inbox.state,
            frames=status.get("collected_frames", 0),
            total_frames=status.get("total_frames", 0),
            external_frames=status.get("external_frames", 0),
            transitions=status.get("transitions", 0),
            optim_steps=status.get("optim_steps", 0),
            model_version=status.get("model_version", 0),
            published_version=status.get("published_version", -1),
            generation=status.get("generation", 0),
            replay=shards,
            last_checkpoint=status.get("last_checkpoint", ""),
            epsilon=status.get("epsilon", 1.0),
            config_json=self._config_for(context),
            stop_reason=status.get("stop_reason", ""),
        )

    def Checkpoint(self, request, context):
        """Cuts a consistent checkpoint at the driver's next boundary; returns its path."""
        try:
            future = self.inbox.request_checkpoint()
            path = future.result(timeout=remaining_seconds(context))
        except IntakeClosed as err:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"cannot checkpoint: {err}")
        except concurrent.futures.TimeoutError:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the checkpoint is still running")
        except Exception as err:
            context.abort(grpc.StatusCode.INTERNAL, f"checkpoint failed: {err}")
        if path is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "checkpoints are off in this run")
        return control_pb.CheckpointReply(
            path=path, frames=self.inbox.status.get("collected_frames", 0)
        )

    def Stop(self, request, context):
        """Asks for a clean stop; with ``wait``, answers once the final checkpoint is written."""
        future = self.inbox.request_stop("stop requested over gRPC")
        logger.warning("gRPC: stop requested by %s", context.peer())
        path = ""
        if request.wait:
            try:
                path = future.result(timeout=remaining_seconds(context))
            except concurrent.futures.TimeoutError:
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "still stopping")
        return control_pb.StopReply(
            checkpoint=path, frames=self.inbox.status.get("collected_frames", 0)
        )

    def Scale(self, request, context):
        """Sets target sizes at the driver's next boundary; with ``wait``, until reached."""
        started = time.perf_counter()
        sizes = {
            "collectors": request.num_collectors,
            "shards": request.num_shards,
            "world_size": request.world_size,
        }
        logger.warning("gRPC: scale to %s requested by %s", sizes, context.peer())
        try:
            future = self.inbox.request_scale(sizes, wait=request.wait)
            target = future.result(timeout=remaining_seconds(context))
        except IntakeClosed as err:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"cannot scale: {err}")
        except concurrent.futures.TimeoutError:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the resize is still running")
        except ConfigError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"cannot scale: {err}")
        except Exception as err:
            context.abort(grpc.StatusCode.INTERNAL, f"scale failed: {err}")
        return control_pb.ScaleReply(
            num_collectors=target.collectors,
            num_shards=target.shards,
            world_size=target.world_size,
            seconds=time.perf_counter() - started,
            frames=self.inbox.status.get("collected_frames", 0),
        )


class ExperienceServicer(pb_grpc.ExperienceServicer):
    """``Insert`` (transition batches into the sharded replay) and ``GetWeights``.

    Args:
        inbox: The driver's inbox (shards, weights, the driver's count).
        admission: Checks every batch (spec, fields, the writer's lease) before it is sent.
        inflight_writes: Replay writes one stream keeps in flight.
        shared_bytes: Size limit of the shared-memory pool for shards on this node (0: off).
    """

    def __init__(
        self,
        inbox: Inbox,
        admission: Admission,
        *,
        inflight_writes: int = 4,
        shared_bytes: int = 0,
    ) -> None:
        self.inbox = inbox
        self.admission = admission
        self.spec = admission.spec
        self.inflight_writes = inflight_writes
        self.shared_bytes = shared_bytes
        self._route: ReplayRoute | None = None
        self._route_lock = threading.Lock()
        self._weights_lock = threading.Lock()
        self._encoded: tuple[tuple[int, int], list, bytes] | None = None

    def route(self) -> ReplayRoute:
        """The run's shards (known once the run is set up)."""
        with self._route_lock:
            if self._route is None:
                if not self.inbox.shards:
                    raise IntakeClosed(f"the run is {self.inbox.state}: replay is not up yet")
                self._route = ReplayRoute(self.inbox, self.shared_bytes)
            return self._route

    def close(self) -> None:
        """Frees the shared-memory blocks."""
        if self._route is not None:
            self._route.close()

    def Insert(self, request_iterator, context):
        """Checks, stores and (through the driver) counts each batch; answers with receipts."""
        stream = None
        caller = caller_identity(context)
        try:
            stream = InsertStream(
                self.route(),
                self.inbox,
                window=self.inflight_writes,
                timeout=remaining_seconds(context),
            )
            for request in request_iterator:
                writer, arrays, frames = self.admission.check(request, caller)
                stream.add(
                    Pending(
                        arrays,
                        writer,
                        request.seq,
                        request.writer_id,
                        tuple(request.episode_returns),
                        tuple(request.episode_lengths),
                        frames=frames,
                    )
                )
            receipts, frames, total = stream.finish()
            return pb.InsertReply(receipts=receipts, frames_counted=frames, total_frames=total)
        except ray.exceptions.RayError as err:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"replay write failed: {err}")
        except grpc.RpcError:  # the client went away; what it sent is still stored and counted
            return None
        except Exception as err:
            abort_refused(context, err)
        finally:
            if stream is not None:
                stream.close()

    def GetWeights(self, request, context):
        """Streams the newest weights if newer than ``(generation, version)``."""
        weights = self.inbox.weights
        asked = (request.generation, request.version)
        if weights is None or weights.key <= asked:
            have = weights.key if weights is not None else (-1, -1)
            yield pb.WeightsChunk(not_newer=True, generation=have[0], version=have[1])
            return
        key, metas, blob = self._encode(weights)
        yield pb.WeightsChunk(
            generation=key[0],
            version=key[1],
            tensors=[pb.Tensor(key=k, dtype=d, shape=s) for k, d, s in metas],
            total_bytes=len(blob),
        )
        view = memoryview(blob)
        for offset in range(0, len(blob), WEIGHTS_CHUNK_BYTES):
            yield pb.WeightsChunk(data=bytes(view[offset : offset + WEIGHTS_CHUNK_BYTES]))

    def GetRoute(self, request, context):
        """The shards' Insert addresses with ``grpc.direct_writes`` (else an empty route)."""
        direct = self.inbox.direct
        if direct is None:
            return pb.Route()
        addresses, group, epoch = direct.route()
        return pb.Route(shard_addresses=addresses, group=group, epoch=epoch)

    def _encode(self, weights) -> tuple[tuple[int, int], list, bytes]:
        with self._weights_lock:
            if self._encoded is None or self._encoded[0] != weights.key:
                metas, blob = encode_state_dict(ray.get(weights.ref, timeout=60))
                self._encoded = (weights.key, metas, blob)
            return self._encoded
