"""Live resizes of a running job: collectors, replay shards and learner ranks (driver side).

Each size changes at the boundary where that is safe, and the frame count stays exact:

* **collectors** (``collector.manage.fleet``): joining collectors start at once and are admitted at
  a later loop boundary, once they answer; the others never pause (the lockstep on-policy loop
  waits for them at its iteration boundary: its batch is every collector's). A leaving one gets no
  new rollout, the ones it has in flight are counted as they finish, then it is retired. The
  highest indices leave first; an index is never reused, so seeds never repeat.
* **replay shards**: at a loop boundary, with the in-flight rollouts counted, the learner
  round finished and the collectors paused: added shards (capacity ``replay.capacity /
  num_shards`` each) take writes at once; removed shards (the highest indices) are drained
  into the others first (``ReplayClient.remove_shards``). Every collector and learner rank is
  then pointed at the new shard list, and collection resumes.
* **learner world size**: at a round boundary the group's in-memory state (any rank's: the
  replicas are identical) starts a new generation of the new size, with no disk round trip;
  weights keep their ``(generation, version)`` order and the global batch is re-split per rank.

Requests come from ``Control/Scale`` (:meth:`Elastic.request`, served by the driver's inbox)
or from the cluster (``collector.num_collectors: auto``, ``services.driver.autoscale``). Every
resize is logged with its cause, kept in :attr:`Elastic.events` and emitted to the ``resize``
hook (``metrics.jsonl`` records, Prometheus ``relayrl_collectors``, ``relayrl_replay_shards``
and ``relayrl_learner_world_size``). A deterministic run (``run.deterministic``) keeps its
sizes (they shape its bits), and so do the shards of a run whose external actors write to them
directly (``grpc.direct_writes``); resume its checkpoint at another size instead. External
actors' driver-path inserts follow the new shard list (``services.grpc.insert``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

import ray

from collector.manage.fleet import Fleet
from replay.shard import remote_shard
from services.checkpoints.cut import drain
from services.config import ConfigError, RunConfig
from services.driver.sizes import Sizes, sized_config

if TYPE_CHECKING:
    from services.driver.ports import Follower
    from services.driver.views import ElasticView

logger = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 120.0  # longest an on-policy boundary waits for joining collectors


class Elastic:
    """The run's target sizes and the resizes that reach them (see the module docstring).

    Args:
        controller: The running controller.

    Attributes:
        target: The sizes asked for last.
        leaving: Collectors told to leave whose rollouts are still in flight.
        events: Every resize done: ``{"what", "from", "to", "cause", "seconds", "frames"}``.
    """

    def __init__(self, controller: ElasticView) -> None:
        self.controller = controller
        self.fleet: Fleet | None = None
        self.target: Sizes | None = None
        self.leaving: set[int] = set()
        self.events: list[dict] = []
        self.dropped = 0  # collectors lost with their node and not re-created
        self._collectors_since: tuple[float, int, str] | None = None  # (start, from, cause)
        self._waiters: list[Future] = []
        self.follow: Follower | None = None  # autoscale.FollowCluster (num_collectors: auto)

    # -- state -------------------------------------------------------------------------------
    def attach(self) -> None:
        """Takes the running collector group (the controller's setup calls it)."""
        self.fleet = Fleet(self.controller.collectors)
        self.target = self.sizes()

    def collecting(self) -> list[int]:
        """Indices of the collectors to issue rollouts to (admitted, not leaving)."""
        collectors = self.controller.collectors
        assert collectors is not None  # set up
        return [i for i in collectors.live() if i not in self.leaving]

    def sizes(self) -> Sizes:
        """The current sizes."""
        c = self.controller
        return Sizes(len(self.collecting()), len(c.shards), c.config.learner.world_size)

    def report(self) -> dict:
        """``{"sizes": {"current": ..., "target": ...}, "collectors_dropped": n}`` (snapshots)."""
        if self.fleet is None:  # before setup
            return {}
        current = self.sizes().to_dict()
        target = (self.target or self.sizes()).to_dict()
        return {
            "sizes": {"current": current, "target": target},
            "collectors_dropped": self.dropped,
        }

    def settled(self) -> bool:
        """Whether every size has reached its target."""
        return self.target is None or (self.sizes() == self.target and not self.leaving)

    # -- requests ----------------------------------------------------------------------------
    def request(
        self,
        collectors: int = 0,
        shards: int = 0,
        world_size: int = 0,
        *,
        cause: str = "scale request",
    ) -> Sizes:
        """Sets new target sizes (0 keeps a size) and starts the resizes; returns the targets.

        Shards and learner ranks change now (the call is made at a loop boundary); collectors
        join and leave over the next boundaries (:meth:`step`).

        Raises:
            ConfigError: Naming the field a size would make invalid, or the setting that
                keeps the run at its size (``run.deterministic``, ``collector.aggregate``,
                ``replay.frame_stack`` with transitions).
        """
        c, config = self.controller, self.controller.config
        current = self.target or self.sizes()
        want = Sizes(
            collectors or current.collectors,
            shards or current.shards,
            world_size or current.world_size,
        )
        self._refuse(config, current, want)
        new_config = sized_config(config, want)
        if want.shards != len(c.shards):
            self._resize_shards(want.shards, new_config, cause)
        if want.world_size != config.learner.world_size:
            self._resize_learners(new_config, cause)
        c.use_config(new_config)
        self.target = want
        if want.collectors != current.collectors:
            self._collectors_to(want.collectors, cause)
        self.step()
        return want

    def wait(self) -> Future:
        """A future resolved with the sizes once every target is reached."""
        future: Future = Future()
        self._waiters.append(future)
        self._resolve()
        return future

    def _refuse(self, config: RunConfig, current: Sizes, want: Sizes) -> None:
        if min(want.collectors, want.shards, want.world_size) < 0:
            raise ConfigError(f"sizes must be >= 0 (0 keeps a size), got {want.to_dict()}")
        if want == current:
            return
        if config.run.deterministic:
            raise ConfigError(
                "run.deterministic: a deterministic run keeps its sizes; stop it and resume "
                "its checkpoint at the new size"
            )
        if want.collectors != current.collectors and config.collector.aggregate:
            raise ConfigError(
                "collector.num_collectors: a run with collector.aggregate keeps its fleet size "
                "while it runs; resume its checkpoint at the new size"
            )
        if want.shards != current.shards and config.grpc.direct_writes:
            raise ConfigError(
                "replay.num_shards: with grpc.direct_writes external actors write to each "
                "shard's own address; resume the run's checkpoint at the new shard count"
            )
        if want.shards != current.shards and config.replay.frame_ring:
            raise ConfigError(
                "replay.num_shards: a frame-deduplicated replay (replay.frame_stack) cannot be "
                "re-sharded"
            )

    # -- collectors --------------------------------------------------------------------------
    def _collectors_to(self, count: int, cause: str) -> None:
        c, fleet = self.controller, self.fleet
        assert fleet is not None  # attached at setup
        before = len(self.collecting()) + len(fleet.joining)
        self._collectors_since = (time.perf_counter(), len(self.collecting()), cause)
        if count > before:
            indices = fleet.start(count - before, generation=c.counters.generation)
            logger.info("collectors: %d starting (%s): %s", len(indices), cause, indices)
            return
        surplus = before - count
        surplus -= len(fleet.cancel(surplus))  # the ones still starting go first
        for index in sorted(self.collecting(), reverse=True)[:surplus]:
            self.leave(index)

    def leave(self, index: int) -> None:
        """Collector ``index`` gets no new rollout; it is retired once none is in flight."""
        self.leaving.add(index)
        self.controller.inflight.retire(index)

    def drop(self, index: int) -> None:
        """Collector ``index`` was lost with its node: retired now, its rollouts dropped."""
        self.leave(index)
        self.dropped += 1
        assert self.fleet is not None and self.target is not None  # attached at setup
        self.fleet.retire(index)
        self.target = dataclasses.replace(self.target, collectors=self.target.collectors - 1)

    def step(self) -> None:
        """At a loop boundary: admits joined collectors, retires drained leaving ones."""
        if self.fleet is None:
            return
        c, collectors = self.controller, self.controller.collectors
        assert collectors is not None  # set up before the fleet was attached
        if self.follow is not None:
            self.follow.step()
        # Lockstep (on-policy): an iteration's batch is every collector's rollout, so a boundary
        # waits for the joining ones (collection is paused between iterations anyway).
        wait = JOIN_TIMEOUT_S if c.algorithm.lockstep and self.fleet.joining else 0
        for index in self.fleet.admit(wait):
            c.inflight.grow(index)
        for index in list(self.leaving):
            if c.inflight.per_collector[index] == 0 or collectors.actors[index] is None:
                self.fleet.retire(index)
                self.leaving.discard(index)
        if self._collectors_since is not None and not self.fleet.joining and not self.leaving:
            started, before, cause = self._collectors_since
            self._collectors_since = None
            self.record("collectors", before, len(self.collecting()), cause, started)
        self._resolve()

    # -- shards ------------------------------------------------------------------------------
    def _resize_shards(self, count: int, config: RunConfig, cause: str) -> None:
        c = self.controller
        assert c.learners is not None and c.collectors is not None and c.replay is not None
        assert self.fleet is not None  # attached at setup
        started, before = time.perf_counter(), len(c.shards)
        drain(c)
        c.learners.flush_replay()
        c.collectors.pause()
        try:
            with c.inbox.barrier(c):
                if count > before:
                    added = [self._start_shard(i, config) for i in range(before, count)]
                    ray.get([s.info.remote() for s in added], timeout=120)
                    c.replay.add_shards(added)
                    c.shards = [*c.shards, *added]
                else:
                    moved = c.replay.remove_shards(list(range(count, before)))
                    logger.info("replay: %d items moved out of the removed shards", moved)
                    for shard in c.shards[count:]:
                        ray.kill(shard, no_restart=True)
                    c.shards = c.shards[:count]
                self.fleet.set_shards([f"{c.run_id}.replay-{i}" for i in range(count)])
                c.learners.set_shards(c.shards)
                c.recovery.watch_shards(c.shards)
                c.inbox.shards = list(c.shards)
        finally:
            c.collectors.resume()
        self.record("shards", before, count, cause, started)

    def _start_shard(self, index: int, config: RunConfig):
        c, cfg = self.controller, config.replay
        return remote_shard(
            c.run_id,
            index,
            cfg.shard_capacity,
            sampler=cfg.sampler,
            seed=config.seed * 100 + index,
            num_cpus=cfg.num_cpus,
            max_restarts=cfg.max_restarts,
            alpha=cfg.alpha,
            fifo_shuffle=cfg.fifo_shuffle,
            fifo_queue=cfg.fifo_queue,
            mmap_dir=cfg.mmap_dir if cfg.storage == "mmap" else None,
            frame_stack=cfg.frame_ring,
            run_seed=config.seed,
        )

    # -- learners ----------------------------------------------------------------------------
    def _resize_learners(self, config: RunConfig, cause: str) -> None:
        """A new learner generation of ``config.learner.world_size`` from the group's state."""
        c = self.controller
        assert c.learners is not None and c.collectors is not None  # set up
        started, before = time.perf_counter(), c.config.learner.world_size
        while c.pending_round is not None:
            c.wait_and_process(timeout=config.controller.log_interval_s)
        states = c.learners.state_dicts()
        c.learners.shutdown()
        c.counters.generation += 1
        c.use_config(config)
        c.learners = c.start_learners()
        c.learners.load_state_dicts(states)
        c.accept_weights(c.learners.publish(), force=True)
        c.collectors.sync_weights(c.weights)
        self.record("world_size", before, config.learner.world_size, cause, started)

    # -- events ------------------------------------------------------------------------------
    def record(self, what: str, before: int, after: int, cause: str, started: float) -> None:
        """Logs, keeps and emits (``resize`` hook) one resize done since ``started``."""
        c = self.controller
        event = {
            "what": what,
            "from": before,
            "to": after,
            "cause": cause,
            "seconds": round(time.perf_counter() - started, 3),
            "frames": c.counters.collected_frames,
            "generation": c.counters.generation,
        }
        self.events.append(event)
        logger.info(
            "resize: %s %d -> %d in %.2fs (%s)", what, before, after, event["seconds"], cause
        )
        c.emit("resize", event)

    def _resolve(self) -> None:
        if self._waiters and self.settled():
            waiters, self._waiters = self._waiters, []
            for future in waiters:
                future.set_result(self.sizes())
