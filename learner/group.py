"""LearnerGroup: placement, rendezvous, step rounds and publication for ``world_size`` ranks."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence

import numpy as np
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from learner.config import LearnerConfig
from learner.rank import LearnerRank
from learner.receipts import PublishedWeights, StepReceipt, verify_receipts


@dataclasses.dataclass(frozen=True)
class PendingRound:
    """A learner round in flight: one receipt reference per rank."""

    round_id: int
    num_steps: int
    expected_version: int
    refs: tuple[ray.ObjectRef, ...]


def actor_resources(resources: dict) -> dict:
    """Maps a bundle such as ``{"CPU": 1, "GPU": 1}`` to Ray actor options."""
    options = {"num_cpus": resources.get("CPU", 0), "num_gpus": resources.get("GPU", 0)}
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
    if custom:
        options["resources"] = custom
    return options


class LearnerGroup:
    """``world_size`` LearnerRank actors in one placement group, joined by torch.distributed.

    Each construction is one *generation*: ranks are named ``<run>.learner-<rank>``, and
    receipts from any other generation fail the round. Rounds are sequential: the group checks
    that every rank answers the round it was sent, with version = previous + steps.

    Args:
        run_name: The run's name (actor names).
        config: Learner configuration.
        model_spec: Q-network architecture (``build() -> nn.Module``).
        shards: Replay shard handles.
        seed: Run seed.
        generation: This generation's number.

    Examples:
        >>> config = LearnerConfig(world_size=2)
        >>> group = LearnerGroup("run", config, spec, shards, seed=0)  # doctest: +SKIP
        >>> receipt = group.step(16)  # doctest: +SKIP
        >>> receipt.published.version  # doctest: +SKIP
        16
    """

    def __init__(
        self,
        run_name: str,
        config: LearnerConfig,
        model_spec,
        shards: Sequence[ray.actor.ActorHandle],
        seed: int,
        *,
        generation: int = 0,
    ) -> None:
        self.config = config
        self.generation = generation
        self.version = 0
        self.round_id = 0
        bundles = [dict(config.resources_per_rank) for _ in range(config.world_size)]
        self.placement_group = placement_group(bundles, strategy=config.placement_strategy)
        ready, _ = ray.wait([self.placement_group.ready()], timeout=config.setup_timeout_s)
        if not ready:
            remove_placement_group(self.placement_group)
            raise TimeoutError(
                f"learner placement group of {config.world_size} x {config.resources_per_rank} "
                f"could not be placed in {config.setup_timeout_s:.0f}s; cluster has "
                f"{ray.cluster_resources()}"
            )
        rank_cls = ray.remote(LearnerRank)
        self.ranks = [
            rank_cls.options(
                name=f"{run_name}.learner-{rank}",
                namespace="relayrl",
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.placement_group, placement_group_bundle_index=rank
                ),
                max_restarts=0,
                **actor_resources(config.resources_per_rank),
            ).remote(rank, generation, config, model_spec, list(shards), seed)
            for rank in range(config.world_size)
        ]
        self._rendezvous()

    def _rendezvous(self) -> None:
        timeout = self.config.setup_timeout_s
        addresses = ray.get([r.node_address.remote() for r in self.ranks], timeout=timeout)
        # All ranks on one node: keep the traffic on loopback.
        address = "127.0.0.1" if len(set(addresses)) == 1 else addresses[0]
        port = ray.get(
            self.ranks[0].open_store.remote(address, self.config.rendezvous_port), timeout=timeout
        )
        ray.get([r.join.remote(address, port) for r in self.ranks], timeout=timeout)
        self.address, self.port = address, port

    def start_round(self, num_steps: int, *, publish: bool = True) -> PendingRound:
        """Sends a round of ``num_steps`` optimizer steps to every rank."""
        self.round_id += 1
        refs = tuple(
            r.step.remote(self.round_id, num_steps, publish and i == 0)
            for i, r in enumerate(self.ranks)
        )
        return PendingRound(self.round_id, num_steps, self.version + num_steps, refs)

    def finish_round(self, pending: PendingRound) -> StepReceipt:
        """Waits for a round's receipts, verifies them and returns rank 0's.

        Raises:
            learner.receipts.ProtocolError: If the ranks disagree or answer the wrong round.
        """
        receipts = ray.get(list(pending.refs))
        receipt = verify_receipts(
            receipts,
            generation=self.generation,
            round_id=pending.round_id,
            expected_version=pending.expected_version,
        )
        self.version = receipt.model_version
        return receipt

    def step(self, num_steps: int, *, publish: bool = True) -> StepReceipt:
        """Runs one round synchronously; see :meth:`start_round`."""
        return self.finish_round(self.start_round(num_steps, publish=publish))

    def step_on(self, batches_per_rank: list[list[dict[str, np.ndarray]]]) -> StepReceipt:
        """Runs one round on given batches: ``batches_per_rank[rank][step]``."""
        self.round_id += 1
        steps = len(batches_per_rank[0])
        refs = [
            r.step_on.remote(self.round_id, b)
            for r, b in zip(self.ranks, batches_per_rank, strict=True)
        ]
        pending = PendingRound(self.round_id, steps, self.version + steps, tuple(refs))
        return self.finish_round(pending)

    def publish(self) -> PublishedWeights:
        """Rank 0 publishes the current weights."""
        weights = ray.get(self.ranks[0].publish.remote())
        if weights.generation != self.generation:
            raise RuntimeError(
                f"publication from generation {weights.generation} refused "
                f"(current generation {self.generation})"
            )
        return weights

    def parameters(self, rank: int = 0) -> dict:
        """Copies of one rank's online parameters."""
        return ray.get(self.ranks[rank].parameters.remote())

    def shutdown(self) -> None:
        """Leaves the process group, kills the ranks and frees the placement group."""
        with contextlib.suppress(ray.exceptions.RayError, TimeoutError):
            ray.get([r.shutdown.remote() for r in self.ranks], timeout=10)
        for rank in self.ranks:
            ray.kill(rank, no_restart=True)
        remove_placement_group(self.placement_group)
