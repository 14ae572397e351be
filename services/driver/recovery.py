"""The driver's reactions to faults, called by the controller at loop boundaries.

:class:`Recovery` holds what the controller needs to absorb a fault or to stop the run naming
it (the failure model in ``docs/checkpoints.md``; the monitors themselves are in
``services.driver.faults``):

- a collector's death: not counted; a crash loop (``collector.crash_loop_deaths`` within
  ``collector.crash_loop_window_s``) or too many deaths overall stops the run;
- an env error inside a rollout: the collector already rebuilt its envs; counted, and past
  ``collector.max_env_errors`` the run stops;
- a rollout past ``collector.rollout_timeout_s``: its collector is killed (Ray restarts it);
- a replay shard found restarted: refilled from the latest checkpoint, its loss counted; before
  a cut every shard must answer (a restarted one is refilled first).

Every message names the component and its node (``collector-1 (node 10.0.0.2/5f2c9a1e)``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING

import ray

from collector.envs.vector import EnvError
from collector.manage.hub import RolloutLostError
from services.driver.faults import ComponentFailure, CrashLoop, ShardMonitor, ShardRestart, where

if TYPE_CHECKING:
    from collector.manage.completions import Finished
    from collector.manage.group import CollectorGroup
    from collector.receipts import RolloutReceipt
    from services.driver.views import RecoveryView

logger = logging.getLogger(__name__)

# Longest gap between two looks at the replay shards' health replies, in seconds.
SHARD_POLL_S = 0.05


class Recovery:
    """Fault handling of one controller (see the module docstring).

    Args:
        controller: What fault handling reads of the run (the controller).
    """

    def __init__(self, controller: RecoveryView) -> None:
        self.controller = controller
        cfg = controller.config.collector
        self.crash_loop = CrashLoop(cfg.crash_loop_deaths, cfg.crash_loop_window_s)
        self.shard_monitor: ShardMonitor | None = None
        self._next_shard_poll = 0.0

    def watch_shards(self, shards) -> None:
        """Starts the health checks of the run's replay shards."""
        cfg = self.controller.config.replay
        self.shard_monitor = ShardMonitor(
            shards,
            interval_s=cfg.health_interval_s,
            restart_timeout_s=cfg.restart_timeout_s,
            max_restarts=cfg.max_restarts,
            capacity=cfg.shard_capacity,
        )

    @property
    def _group(self) -> CollectorGroup:
        collectors = self.controller.collectors
        assert collectors is not None  # started before any rollout
        return collectors

    @property
    def _monitor(self) -> ShardMonitor:
        assert self.shard_monitor is not None  # watch_shards() ran at setup
        return self.shard_monitor

    # -- collectors ---------------------------------------------------------------------------
    def _collector(self, index: int) -> str:
        return f"collector-{index} ({where(self._group.nodes[index])})"

    def receipt(self, finished: Finished) -> RolloutReceipt | None:
        """The receipt of a finished rollout; None if the rollout failed.

        A failure is handled here (:meth:`on_collector_death`, :meth:`on_env_error`, a rollout
        lost with its hub); any other error inside the rollout is raised.
        """
        err, index = finished.error, finished.index
        if err is None:
            return finished.receipt
        if isinstance(err, ray.exceptions.RayActorError):
            self.on_collector_death(index, finished.ticket, err)
        elif isinstance(err, RolloutLostError):
            self.controller.counters.collector_failures += 1
            logger.warning("%s: rollout not counted: %s", self._collector(index), err)
        elif isinstance(err, ray.exceptions.RayTaskError) and isinstance(err.cause, EnvError):
            self.on_env_error(index, err.cause)
        else:
            raise err
        return None

    def on_collector_death(self, index: int, ticket: Hashable, err: Exception) -> None:
        """A rollout failed because its collector died: not counted; stop on a crash loop.

        Raises:
            ComponentFailure: The collector is crash-looping, or collectors died too often.
        """
        c, collectors = self.controller, self._group
        if collectors.actors[index] is None:  # retired (left the fleet): dropped, no death
            return
        c.counters.collector_failures += 1
        deaths = collectors.restarts
        collectors.mark_dead(index, ticket)  # one death fails several rollouts
        if collectors.restarts == deaths:
            return  # another rollout lost to a death already handled
        cfg = c.config.collector
        name = self._collector(index)
        if self.crash_loop.record(f"collector-{index}"):
            raise ComponentFailure(
                f"{name} died {cfg.crash_loop_deaths} times within {cfg.crash_loop_window_s:g} s "
                f"(collector.crash_loop_deaths); stopping the run instead of restarting it. "
                f"Last error: {err}"
            ) from err
        if collectors.restarts > cfg.max_restarts * len(collectors):
            raise ComponentFailure(
                f"collectors died {collectors.restarts} times (collector.max_restarts="
                f"{cfg.max_restarts} each); last: {name}: {err}"
            ) from err
        logger.warning(
            "%s died; Ray restarts it, its rollout is not counted and it gets the newest "
            "weights with its next one (%s)",
            name,
            type(err).__name__,
        )

    def on_env_error(self, index: int, error: EnvError) -> None:
        """An env raised inside a rollout: the collector rebuilt its envs; nothing counted.

        Raises:
            ComponentFailure: Past ``collector.max_env_errors``.
        """
        counters = self.controller.counters
        counters.env_errors += 1
        limit = self.controller.config.collector.max_env_errors
        if counters.env_errors > limit:
            raise ComponentFailure(
                f"{self._collector(index)}: {error}; {counters.env_errors} env errors exceed "
                f"collector.max_env_errors={limit}; stopping the run"
            )
        logger.warning(
            "%s: %s; its envs were rebuilt and the rollout is not counted (%d/%d env errors)",
            self._collector(index),
            error,
            counters.env_errors,
            limit,
        )

    def _kill_stuck_collectors(self) -> None:
        c = self.controller
        timeout = c.config.collector.rollout_timeout_s
        for _, index in c.inflight.overdue(timeout):  # each once; its failure follows
            logger.warning(
                "%s: rollout stuck for over %g s (collector.rollout_timeout_s); killing it, "
                "Ray restarts it",
                self._collector(index),
                timeout,
            )
            actor = self._group.actors[index]
            if actor is not None:  # a retired one's failure follows
                ray.kill(actor, no_restart=False)

    # -- replay shards ------------------------------------------------------------------------
    def note_writes(self, writes) -> None:
        """Takes a counted rollout's write receipts (the shards' loss figures)."""
        self._monitor.note_writes(writes)

    def cleared(self) -> None:
        """The driver emptied every shard."""
        self._monitor.cleared()

    def check(self) -> None:
        """Handles restarted or stuck replay shards and stuck rollouts, without blocking.

        Called at every event; the shards' health replies are looked at every
        ``SHARD_POLL_S`` at most (a look costs a Ray call per shard, and the checks themselves
        go out every ``replay.health_interval_s``).
        """
        now = time.monotonic()
        if self.shard_monitor is not None and now >= self._next_shard_poll:
            self._next_shard_poll = now + SHARD_POLL_S
            for event in self.shard_monitor.poll(now):
                self.refill(event)
        if self.controller.inflight:
            self._kill_stuck_collectors()

    def before_cut(self) -> None:
        """Waits until every shard answers (refilling restarted ones) before a checkpoint."""
        for event in self._monitor.check_now():
            self.refill(event)
        # The driver's own view of the shards (its client marks a failed shard down).
        replay = self.controller.replay
        assert replay is not None  # started at setup
        replay.revive(self.controller.config.replay.restart_timeout_s)

    def after_cut(self) -> None:
        """The shards were busy dumping for the driver: not stuck."""
        self._monitor.rearm()

    def refill(self, event: ShardRestart) -> None:
        """A shard came back empty: refill it from the latest checkpoint; count the loss."""
        c = self.controller
        counters = c.counters
        counters.replay_restarts += 1
        counters.replay_items_lost += event.lost
        refilled, source = 0, "no checkpoint yet: it stays empty"
        last = c.last_checkpoint
        if last is not None and len(list(last.glob("replay-*"))) != len(c.shards):
            source = f"{last} was cut at another shard count (resized since): it stays empty"
        elif last is not None:
            path = last / f"replay-{event.index}"
            try:
                stats = ray.get(c.shards[event.index].load.remote(str(path)), timeout=600)
                refilled, source = int(stats["size"]), f"refilled from {c.last_checkpoint}"
            except Exception as err:  # the run goes on with an empty shard
                source = f"refill from {path} failed ({err}): it stays empty"
        counters.replay_items_refilled += refilled
        c.inbox.shard_restarted(event.index)  # its direct Insert server, if any, serves again
        self._monitor.rearm()
        logger.warning(
            "replay-%d (%s, pid %s) died; Ray restarted it (restart %d of %d); %s "
            "(%d items); %d items it held at its last report are lost",
            event.index,
            where(event.node),
            event.pid,
            event.restarts,
            c.config.replay.max_restarts,
            source,
            refilled,
            event.lost,
        )
