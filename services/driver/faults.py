"""Fault handling on the driver: replay shard health, crash loops, stuck calls, attribution.

The failure model (``docs/checkpoints.md``, "Faults") asks that every fault be handled and
named. The pure parts live here; the controller calls them at loop boundaries:

- :class:`ShardMonitor` sends each replay shard a cheap ``health`` call every
  ``replay.health_interval_s`` without blocking the loop. A reply with a new incarnation means
  Ray restarted the shard (it comes back empty): the controller refills it from the latest
  checkpoint and counts the items it held at its last report as lost. A shard that stays down
  longer than ``replay.restart_timeout_s``, or dies more than ``replay.max_restarts`` times,
  stops the run with :class:`ComponentFailure`; one that is alive but has not answered a check
  for ``replay.restart_timeout_s`` (stuck) is killed, so that Ray restarts it.
- :class:`CrashLoop` stops a run whose same component died ``deaths`` times within
  ``window_s`` instead of restarting it forever.
- :func:`where` names a component's node for messages: ``replay-1 (node 10.0.0.3/5f2c9a1e)``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Sequence

import ray

logger = logging.getLogger(__name__)


class ComponentFailure(RuntimeError):
    """A component failed in a way the run cannot absorb; the message names it and its node."""


class DeterminismError(ComponentFailure):
    """A deterministic run lost a component it cannot replay in the same order (it stops).

    Raised by ``services.driver.loops.deterministic``; the message names what was lost and
    says to resume from the last checkpoint.
    """


_NODE_ADDRESSES: dict[str, str] = {}


def where(node_id: str | None) -> str:
    """``node <ip>/<id prefix>`` of a Ray node id (``node ?`` when unknown)."""
    if not node_id:
        return "node ?"
    if node_id not in _NODE_ADDRESSES:
        with contextlib.suppress(Exception):  # naming a node must never mask the fault itself
            _NODE_ADDRESSES.update({n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()})
    return f"node {_NODE_ADDRESSES.get(node_id, '?')}/{node_id[:8]}"


@dataclasses.dataclass
class ShardHealth:
    """What the driver last heard from one shard."""

    incarnation: str | None = None
    size: int = 0
    node: str | None = None
    pid: int | None = None
    restarts: int = 0
    answered_at: float = 0.0  # when its last health reply was taken
    written: int = 0  # the shard's write count as of the newest write receipt
    cleared_at: int = 0  # its write count when the driver last cleared it
    down_since: float | None = None
    probe: ray.ObjectRef | None = None
    probe_sent: float = 0.0


@dataclasses.dataclass(frozen=True)
class ShardRestart:
    """A shard Ray restarted: it is empty now.

    Attributes:
        index: Shard index (``replay-<index>``).
        lost: Items it held at its last health report.
        node: Node it ran on before the restart.
        pid: Process that died.
        restarts: Restarts of this shard so far.
    """

    index: int
    lost: int
    node: str | None
    pid: int | None
    restarts: int


class ShardMonitor:
    """Non-blocking health checks of the replay shards (see the module docstring).

    Args:
        shards: Shard handles, in index order.
        interval_s: Seconds between checks of a shard.
        restart_timeout_s: A shard down for longer fails the run.
        max_restarts: Restarts Ray grants each shard.
        capacity: Items one shard holds (bounds the loss figure).

    A shard's loss when it restarts is what it held as of its newest sign of life: its last
    health reply, or the write receipts the driver counted since (``note_writes``), whichever
    says more.
    """

    def __init__(
        self,
        shards: Sequence[ray.actor.ActorHandle],
        *,
        interval_s: float,
        restart_timeout_s: float,
        max_restarts: int,
        capacity: int,
    ) -> None:
        self.shards = list(shards)
        self.capacity = capacity
        self.interval_s = interval_s
        self.restart_timeout_s = restart_timeout_s
        self.max_restarts = max_restarts
        self.health = [ShardHealth() for _ in self.shards]

    def note_writes(self, writes) -> None:
        """Takes the write receipts of a counted rollout (``RolloutReceipt.writes``)."""
        for write in writes:
            health = self.health[write.shard_id]
            health.written = max(health.written, write.write_count)

    def cleared(self) -> None:
        """The driver emptied every shard (on-policy iteration boundary)."""
        for health in self.health:
            health.cleared_at = health.written
            health.size = 0

    def rearm(self) -> None:
        """Restarts the stuck-shard clocks after the driver kept the shards busy itself.

        A check queued behind a cut's dumps or a refill is not mistaken for a stuck shard.
        """
        now = time.monotonic()
        for health in self.health:
            if health.probe is not None:
                health.probe_sent = now

    def check_now(self) -> list[ShardRestart]:
        """Waits until every shard has answered since this call began (before a checkpoint cut).

        A shard that is down is waited for, and one that is stuck is killed (see :meth:`poll`),
        until it is back, so a cut never captures a restarted shard before its refill; one down
        longer than ``restart_timeout_s`` fails the run.
        """
        started = time.monotonic()
        events: list[ShardRestart] = []
        while True:
            events += self.poll(send=False)
            waiting = [h for h in self.health if h.answered_at < started]
            if not waiting:
                return events
            for index, health in enumerate(self.health):
                if health.probe is None and health.answered_at < started:
                    health.probe = self.shards[index].health.remote()
                    health.probe_sent = time.monotonic()
            probes = [h.probe for h in waiting if h.probe is not None]
            ray.wait(probes, num_returns=len(probes), timeout=self.interval_s)

    def poll(self, now: float | None = None, *, send: bool = True) -> list[ShardRestart]:
        """Collects the replies that came back and (with ``send``) sends the checks that are due.

        Returns:
            The shards found restarted since the last poll.

        Raises:
            ComponentFailure: A shard has been down longer than ``restart_timeout_s`` or used up
                its restarts.
        """
        now = time.monotonic() if now is None else now
        restarts = []
        for index, health in enumerate(self.health):
            if health.probe is not None and ray.wait([health.probe], timeout=0)[0]:
                probe, health.probe = health.probe, None
                try:
                    reply = ray.get(probe)
                except ray.exceptions.RayActorError as err:
                    self._down(index, health, now, err)
                else:
                    event = self._answered(index, health, reply)
                    if event is not None:
                        restarts.append(event)
            elif health.probe is not None and now - health.probe_sent > self.restart_timeout_s:
                self._stuck(index, health, now)
            since = health.down_since
            if since is not None and time.monotonic() - since > self.restart_timeout_s:
                raise ComponentFailure(
                    f"replay-{index} ({where(health.node)}) has been down for "
                    f"{time.monotonic() - since:.0f} s (replay.restart_timeout_s="
                    f"{self.restart_timeout_s:g}); stopping the run"
                )
            if send and health.probe is None and now - health.probe_sent >= self.interval_s:
                health.probe = self.shards[index].health.remote()
                health.probe_sent = now
        return restarts

    def _stuck(self, index: int, health: ShardHealth, now: float) -> None:
        """A shard that has not answered a health check for ``restart_timeout_s`` is killed.

        Ray restarts it, and it is handled like a shard that died (refilled, loss counted).
        """
        logger.warning(
            "replay-%d (%s, pid %s) has not answered for %.0f s (replay.restart_timeout_s); "
            "killing it so that Ray restarts it",
            index,
            where(health.node),
            health.pid,
            now - health.probe_sent,
        )
        ray.kill(self.shards[index], no_restart=False)
        health.probe = None
        health.probe_sent = now
        if health.down_since is None:
            health.down_since = now

    def _down(self, index: int, health: ShardHealth, now: float, err: BaseException) -> None:
        if health.down_since is None:
            health.down_since = now
            logger.warning(
                "replay-%d (%s, pid %s) is down: %s; waiting for Ray to restart it",
                index,
                where(health.node),
                health.pid,
                type(err).__name__,
            )
        if isinstance(err, ray.exceptions.ActorDiedError) and health.restarts >= self.max_restarts:
            raise ComponentFailure(
                f"replay-{index} ({where(health.node)}) died again after {health.restarts} "
                f"restarts (replay.max_restarts={self.max_restarts}); stopping the run"
            ) from err

    def _answered(self, index: int, health: ShardHealth, reply: dict) -> ShardRestart | None:
        event = None
        if health.incarnation is not None and reply["incarnation"] != health.incarnation:
            health.restarts += 1
            held = min(max(health.written - health.cleared_at, 0), self.capacity)
            lost = max(health.size, held)
            event = ShardRestart(index, lost, health.node, health.pid, health.restarts)
            health.written = health.cleared_at = 0
        health.incarnation = reply["incarnation"]
        health.size = int(reply["size"])
        health.node = reply["node"]
        health.pid = int(reply["pid"])
        health.down_since = None
        health.answered_at = time.monotonic()
        return event


class CrashLoop:
    """Deaths of each component in a sliding window; too many means stop, not restart.

    Args:
        deaths: Deaths within ``window_s`` that make a crash loop.
        window_s: Window length in seconds.
    """

    def __init__(self, deaths: int, window_s: float) -> None:
        self.deaths = deaths
        self.window_s = window_s
        self.times: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)

    def record(self, component: str, now: float | None = None) -> bool:
        """Records one death of ``component``; True if it is now crash-looping."""
        now = time.monotonic() if now is None else now
        times = self.times[component]
        times.append(now)
        while times and now - times[0] > self.window_s:
            times.popleft()
        return len(times) >= self.deaths
