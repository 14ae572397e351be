"""``collector.num_collectors: auto``: a collector fleet that follows the cluster.

The fleet's size is what the cluster's CPUs offer the run: the CPUs of the nodes that are alive,
less what the run's replay shards and learner ranks ask for, divided by ``collector.num_cpus``,
between ``collector.min_collectors`` and ``collector.max_collectors`` (:func:`offered`). The
driver sizes the fleet so at start and looks again every :data:`FOLLOW_INTERVAL_S` at a loop
boundary: a node added (by the Ray autoscaler, or ``ray start --address``) grows the fleet, a
node lost shrinks it. The collectors of a lost node are not re-created on a full cluster: they
are dropped (retired, their rollouts in flight not counted) and counted
(``relayrl_collectors_dropped_total``). Each change is a resize with its cause
(``services.driver.elastic``).

Examples:
    >>> from services.config import load_config
    >>> config = load_config(overrides=["collector.num_collectors=auto", "collector.num_cpus=1"])
    >>> offered(config, cluster_cpus=8.0)  # 8 CPUs less 2 shards x 0.5 and 1 rank x 1
    6
    >>> offered(config.__class__(), cluster_cpus=0.0)  # never below min_collectors
    1
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

import ray

from services.config import ConfigError, RunConfig
from services.driver.inflight import InFlight
from services.driver.sizes import Sizes, sized_config

if TYPE_CHECKING:
    from services.driver.views import AutoscaleView

logger = logging.getLogger(__name__)

FOLLOW_INTERVAL_S = 2.0


def offered(config: RunConfig, cluster_cpus: float) -> int:
    """Collectors the cluster's ``cluster_cpus`` offer a run of ``config`` (see the module)."""
    c = config.collector
    others = config.replay.num_shards * config.replay.num_cpus
    others += config.learner.world_size * config.learner.resources_per_rank.get("CPU", 0.0)
    if c.num_cpus > 0:
        count = math.floor((cluster_cpus - others) / c.num_cpus + 1e-9)
    else:
        count = c.max_collectors or c.min_collectors
    count = max(count, c.min_collectors)
    return min(count, c.max_collectors) if c.max_collectors else count


def size_fleet(controller: AutoscaleView) -> RunConfig:
    """At setup: sizes an ``auto`` fleet to the cluster and starts following it.

    Returns:
        The run's config with that many collectors (the controller runs on it).
    """
    config = controller.config
    count = offered(config, ray.cluster_resources().get("CPU", 0.0))
    sizes = Sizes(count, config.replay.num_shards, config.learner.world_size)
    config = sized_config(config, sizes)
    controller.use_config(config)
    controller.inflight = InFlight(count, config.collector.max_inflight)
    controller.elastic.follow = FollowCluster(controller)
    logger.info("collectors: auto, %d for the cluster's CPUs", count)
    return config


def alive_nodes() -> set[str]:
    """Ids of the cluster's nodes that are alive."""
    return {node["NodeID"] for node in ray.nodes() if node.get("Alive")}


class FollowCluster:
    """Keeps an ``auto`` fleet at the size the cluster offers (see the module docstring).

    Args:
        controller: The running controller (its ``elastic`` resizes the fleet).
        interval_s: Seconds between looks at the cluster.
    """

    def __init__(self, controller: AutoscaleView, interval_s: float = FOLLOW_INTERVAL_S) -> None:
        self.controller = controller
        self.interval_s = interval_s
        self._next = time.perf_counter() + interval_s

    def step(self) -> None:
        """At a loop boundary, at most every ``interval_s``: drop lost collectors, resize."""
        now = time.perf_counter()
        if now < self._next:
            return
        self._next = now + self.interval_s
        c = self.controller
        elastic, collectors = c.elastic, c.collectors
        assert collectors is not None and elastic.target is not None  # set up
        alive, before = alive_nodes(), len(elastic.collecting())
        lost = [i for i in elastic.collecting() if collectors.nodes[i] not in (None, *alive)]
        for index in lost:
            logger.warning("collector-%d was on a lost node: dropped, not re-created", index)
            elastic.drop(index)
        if lost:
            elastic.record("collectors", before, before - len(lost), "node lost: dropped", now)
        cpus = ray.cluster_resources().get("CPU", 0.0)
        want = offered(c.config, cpus)
        if want == elastic.target.collectors:
            return
        try:
            elastic.request(collectors=want, cause=f"cluster offers {cpus:g} CPUs")
        except ConfigError as err:  # e.g. an on-policy batch the new size cannot split
            logger.warning("collectors: the cluster offers %d, refused: %s", want, err)
