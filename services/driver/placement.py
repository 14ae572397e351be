"""Per-run resource reservation: one placement group for a run's collectors and replay shards.

Every run reserves what its services ask for before it starts them: one bundle per collector
(``{"CPU": collector.num_cpus}``) and per replay shard (``{"CPU": replay.num_cpus}``), in one
placement group named ``<run id>.services`` (strategy ``SPREAD``: best effort across nodes).
The learner ranks reserve their own group (``learner/ranks/placement.py``). On a shared cluster a
run therefore either gets all of its services or waits for them; one that cannot be placed within
``learner.setup_timeout_s`` fails with a :class:`PlacementError` that names what it asked for
and what the cluster has (total and free), instead of hanging with half of its actors started.

Actors that ask for no resources (``num_cpus: 0``) are not part of the group (Ray refuses empty
bundles) and are scheduled as usual.

Examples:
    >>> placement = reserve_services(config, run_id)  # doctest: +SKIP
    >>> shards = remote_shards(run_id, config.replay, scheduling=placement.shards)  # doctest: +SKIP
    >>> placement.release()  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

logger = logging.getLogger(__name__)


class PlacementError(RuntimeError):
    """A run's resources could not be reserved; the message names them and the cluster's."""


HIDDEN = ("memory", "object_store_memory")


def _fmt(resources: dict[str, float]) -> str:
    """``{CPU: 2.5, GPU: 1}``: logical resources, without node and memory entries."""
    shown = [
        f"{key}: {value:g}"
        for key, value in sorted(resources.items())
        if key not in HIDDEN and not key.startswith(("node:", "accelerator_type:"))
    ]
    return "{" + ", ".join(shown) + "}"


def run_demand(config) -> dict[str, float]:
    """Total resources a run's actors ask for (collectors, replay shards, learner ranks)."""
    demand: dict[str, float] = {
        "CPU": config.collector.fleet_size * config.collector.num_cpus
        + config.replay.num_shards * config.replay.num_cpus
    }
    for key, value in config.learner.resources_per_rank.items():
        demand[key] = demand.get(key, 0.0) + config.learner.world_size * value
    return {k: v for k, v in demand.items() if v > 0}


def demand_text(config) -> str:
    """What a run asks for, per role and in total, for error messages and logs."""
    c = config
    return (
        f"{c.collector.fleet_size} collectors x {{CPU: {c.collector.num_cpus:g}}}, "
        f"{c.replay.num_shards} replay shards x {{CPU: {c.replay.num_cpus:g}}}, "
        f"{c.learner.world_size} learner ranks x {_fmt(dict(c.learner.resources_per_rank))}; "
        f"total {_fmt(run_demand(config))}"
    )


def cluster_text() -> str:
    """The connected cluster's total and currently free resources."""
    return f"total {_fmt(ray.cluster_resources())}, free {_fmt(ray.available_resources())}"


@dataclasses.dataclass
class ServicePlacement:
    """The reserved placement group of one run's services.

    Attributes:
        group: The placement group (None when no service asks for resources).
        collectors: Scheduling strategy per collector (None: default scheduling).
        shards: Scheduling strategy per replay shard (None: default scheduling).
    """

    group: PlacementGroup | None
    collectors: list[PlacementGroupSchedulingStrategy | None]
    shards: list[PlacementGroupSchedulingStrategy | None]

    def release(self) -> None:
        """Removes the placement group (after the actors in it were killed); idempotent."""
        if self.group is not None:
            remove_placement_group(self.group)
            self.group = None


def release_services(placement: ServicePlacement | None) -> None:
    """Releases a run's reservation, if any (the controller's shutdown calls it)."""
    if placement is not None:
        placement.release()


def reserve_services(config, run_id: str, *, timeout_s: float | None = None) -> ServicePlacement:
    """Reserves one bundle per collector and replay shard of a run, waiting up to a timeout.

    Args:
        config: The run's :class:`services.config.sections.RunConfig`.
        run_id: The run id (names the group ``<run id>.services``).

    Keyword Args:
        timeout_s: Seconds to wait for the reservation (default ``learner.setup_timeout_s``).

    Returns:
        The reservation; pass its ``collectors`` and ``shards`` strategies to the actors.

    Raises:
        PlacementError: If the bundles cannot be placed in time; the message names the run's
            demand and the cluster's total and free resources.
    """
    timeout_s = config.learner.setup_timeout_s if timeout_s is None else timeout_s
    roles = [("collector", config.collector.num_cpus)] * config.collector.fleet_size
    roles += [("shard", config.replay.num_cpus)] * config.replay.num_shards
    bundles = [{"CPU": cpus} for _, cpus in roles if cpus > 0]
    if not bundles:
        fleet, shards = config.collector.fleet_size, config.replay.num_shards
        return ServicePlacement(None, [None] * fleet, [None] * shards)
    group = placement_group(bundles, strategy="SPREAD", name=f"{run_id}.services")
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise PlacementError(
            f"run {run_id} could not reserve its resources in {timeout_s:g}s "
            f"(learner.setup_timeout_s): it asks for {demand_text(config)}; "
            f"the cluster has {cluster_text()}"
        )
    strategies: dict[str, list] = {"collector": [], "shard": []}
    index = 0
    for role, cpus in roles:
        strategy = None
        if cpus > 0:
            strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)
            index += 1
        strategies[role].append(strategy)
    logger.info("run %s reserved %s", run_id, demand_text(config))
    return ServicePlacement(group, strategies["collector"], strategies["shard"])
