"""Placement of the learner ranks: one placement group of ``world_size`` bundles."""

from __future__ import annotations

from collections.abc import Sequence

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from learner.config import LearnerConfig
from learner.ranks.rank import LearnerRank


def actor_resources(resources: dict) -> dict:
    """Maps a bundle such as ``{"CPU": 1, "GPU": 1}`` to Ray actor options."""
    options = {"num_cpus": resources.get("CPU", 0), "num_gpus": resources.get("GPU", 0)}
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
    if custom:
        options["resources"] = custom
    return options


def place_ranks(
    run_name: str,
    config: LearnerConfig,
    model_spec,
    shards: Sequence[ray.actor.ActorHandle],
    seed: int,
    generation: int,
    **rank_options,
) -> tuple[PlacementGroup, list]:
    """Reserves ``world_size`` bundles of ``resources_per_rank`` and starts one rank in each.

    Ranks are named ``<run>.learner-<rank>`` in namespace ``relayrl`` and are not restarted by
    Ray (a dead rank fails the generation). With a GPU in the bundle Ray sets the rank's
    ``CUDA_VISIBLE_DEVICES``, so the rank uses ``cuda:0``.

    Args:
        run_name: The run's name.
        config: Learner configuration (world size, bundle, strategy, setup timeout).
        model_spec: Policy network architecture.
        shards: Replay shard handles.
        seed: Run seed.
        generation: The generation the ranks belong to.
        **rank_options: Keyword arguments of :class:`LearnerRank` (factories).

    Returns:
        The placement group and the rank handles, in rank order.

    Raises:
        TimeoutError: If the bundles cannot be placed within ``setup_timeout_s``.
    """
    bundles = [dict(config.resources_per_rank) for _ in range(config.world_size)]
    group = placement_group(bundles, strategy=config.placement_strategy)
    ready, _ = ray.wait([group.ready()], timeout=config.setup_timeout_s)
    if not ready:
        remove_placement_group(group)
        raise TimeoutError(
            f"learner placement group of {config.world_size} x {config.resources_per_rank} "
            f"({config.placement_strategy}) could not be placed in "
            f"{config.setup_timeout_s:.0f}s; cluster has {ray.cluster_resources()}"
        )
    rank_cls = ray.remote(LearnerRank)
    ranks = [
        rank_cls.options(
            name=f"{run_name}.learner-{rank}",
            namespace="relayrl",
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=rank
            ),
            max_restarts=0,
            **actor_resources(config.resources_per_rank),
        ).remote(rank, generation, config, model_spec, list(shards), seed, **rank_options)
        for rank in range(config.world_size)
    ]
    return group, ranks
