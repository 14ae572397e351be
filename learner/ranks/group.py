"""LearnerGroup: placement, rendezvous, rounds, publication and state of ``world_size`` ranks."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import ray
from ray.util.placement_group import remove_placement_group

from learner.config import LearnerConfig
from learner.losses import loss_factory_for
from learner.plugins import check_stepper
from learner.ranks.placement import place_ranks
from learner.ranks.rendezvous import join_ranks
from learner.ranks.resize import states_for_world_size
from learner.receipts import (
    ProtocolError,
    PublishedWeights,
    StaleGenerationError,
    StepReceipt,
    verify_receipts,
)
from learner.weights import Schema, check_schema, spec_schema

if TYPE_CHECKING:
    from learner.ranks.sampling import EpochPlan

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PendingRound:
    """A learner round in flight: one receipt reference per rank, and rank 0's weights."""

    round_id: int
    num_steps: int
    expected_version: int
    refs: tuple[ray.ObjectRef, ...]
    generation: int = 0
    weights: ray.ObjectRef | None = None


class LearnerGroup:
    """``world_size`` LearnerRank actors in one placement group, joined by torch.distributed.

    Each construction is one *generation*: ranks are named ``<run>.learner-<rank>``, and a
    round, receipt or publication of any other generation is refused
    (:class:`StaleGenerationError`). Rounds are sequential (one in flight): every rank must
    answer the round it was sent, alike, with version = previous + steps; anything else fails
    the generation (:class:`ProtocolError`, and the group refuses further commands). The
    published tensors are checked against the collectors' policy (``model_spec``) at the first
    publication.

    Publication: rank 0 extracts the weights (CPU copies) once per publication as a second
    return value of its round (or :meth:`publish`) call: stored once, owned by the driver (a
    publication outlives its generation's ranks; small weights travel inline). The group wraps
    the reference in :class:`PublishedWeights` with its generation and the verified version.

    Args:
        run_name: The run's name (actor names).
        config: Learner configuration.
        model_spec: Policy network architecture (``build() -> nn.Module``), shared with collectors.
        shards: Replay shard handles.
        seed: Run seed (a resized restore derives the ranks' RNG streams from it).

    Keyword Args:
        generation: This generation's number.
        loss_factory: Overrides ``config.loss``: ``factory(policy_network, config)``.
        stepper_factory: Overrides ``config.stepper``: ``factory(loss_module, config)``.
        policy_schema: Expected ``{name: (shape, dtype)}`` of the published weights; default the
            schema of ``model_spec.build()``.
        deterministic: ``run.deterministic`` (see :class:`learner.ranks.rank.LearnerRank`).

    Raises:
        ValueError: If the loss or stepper cannot be resolved (before any actor starts).
        TimeoutError: If the placement group cannot be placed in ``setup_timeout_s``.

    Examples:
        >>> config = LearnerConfig(world_size=2)
        >>> group = LearnerGroup("run", config, spec, shards, seed=0)  # doctest: +SKIP
        >>> receipt = group.step(16)  # doctest: +SKIP
        >>> receipt.published.version  # doctest: +SKIP
        16
        >>> states = group.state_dicts()  # torch.save-able, weights_only  # doctest: +SKIP
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
        loss_factory=None,
        stepper_factory=None,
        policy_schema: Schema | None = None,
        deterministic: bool = False,
    ) -> None:
        if loss_factory is None:
            loss_factory_for(config)  # fail on a bad path before any actor starts
        if stepper_factory is None:
            check_stepper(config.resolved_stepper)
        self.config = config
        self.seed = seed
        self.generation = generation
        self.version = 0
        self.round_id = 0
        self.failed: str | None = None
        self.inflight: PendingRound | None = None
        self.expected_schema = policy_schema
        self.model_spec = model_spec
        self._schema_checked = False
        self.placement_group, self.ranks = place_ranks(
            run_name,
            config,
            model_spec,
            shards,
            seed,
            generation,
            loss_factory=loss_factory,
            stepper_factory=stepper_factory,
            deterministic=deterministic,
        )
        try:
            self.address, self.port = join_ranks(self.ranks, config)
            self.nodes = ray.get(
                [r.node_address.remote() for r in self.ranks], timeout=config.setup_timeout_s
            )
        except Exception:
            self.shutdown()
            raise

    def culprits(self, refs: Sequence[ray.ObjectRef]) -> str:
        """Names the ranks whose reply failed or is missing: ``learner-1 (node 10.0.0.2) died``."""
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        names = []
        for rank, ref in enumerate(refs):
            where = f"learner-{rank} (node {self.nodes[rank]})"
            if ref not in ready:
                names.append(f"{where} did not answer")
                continue
            try:
                ray.get(ref, timeout=0)
            except ray.exceptions.RayActorError:
                names.append(f"{where} died")
            except ray.exceptions.RayError:
                names.append(f"{where} raised")
        return ", ".join(names) or "no rank"

    # -- protocol ----------------------------------------------------------------------------
    def _ensure_usable(self) -> None:
        if self.failed is not None:
            raise ProtocolError(f"generation {self.generation} has failed: {self.failed}")

    def _fail(self, reason: str) -> ProtocolError:
        self.failed = reason
        self.inflight = None
        logger.error("learner generation %d failed: %s", self.generation, reason)
        return ProtocolError(f"generation {self.generation} failed: {reason}")

    def _issue(
        self, num_steps: int, refs: Sequence[ray.ObjectRef], weights: ray.ObjectRef | None = None
    ) -> PendingRound:
        pending = PendingRound(
            self.round_id,
            num_steps,
            self.version + num_steps,
            tuple(refs),
            self.generation,
            weights,
        )
        self.inflight = pending
        return pending

    def _ensure_idle(self) -> None:
        self._ensure_usable()
        if self.inflight is not None:
            raise ProtocolError(
                f"round {self.inflight.round_id} is still in flight; finish it first"
            )

    def _next_round(self) -> int:
        self._ensure_idle()
        self.round_id += 1
        return self.round_id

    def start_round(
        self,
        num_steps: int,
        *,
        publish: bool = True,
        beta: float | None = None,
        epochs: EpochPlan | None = None,
    ) -> PendingRound:
        """Sends a round of ``num_steps`` optimizer steps to every rank (one round at a time).

        ``beta`` is the importance-weight exponent for prioritized replay (annealed by the
        driver); None keeps the ranks' current one. ``epochs`` makes it an on-policy round
        (``num_steps`` must be ``epochs.steps``; see ``LearnerRank.step``).
        """
        round_id = self._next_round()
        replies = [
            r.step.remote(round_id, num_steps, publish and i == 0, self.generation, beta, epochs)
            for i, r in enumerate(self.ranks)
        ]
        weights = replies[0][1] if publish else None
        return self._issue(num_steps, [receipt for receipt, _ in replies], weights)

    def finish_round(self, pending: PendingRound) -> StepReceipt:
        """Waits for a round's receipts (``command_timeout_s``), verifies and returns rank 0's.

        Raises:
            StaleGenerationError: If the round belongs to another generation (nothing changes).
            ProtocolError: If the ranks disagree, answer the wrong round, fail or time out; the
                generation is failed.
        """
        self.check_generation(pending.generation, "round")
        self._ensure_usable()
        if self.inflight is None or pending.round_id != self.inflight.round_id:
            raise ProtocolError(f"round {pending.round_id} is not the round in flight")
        try:
            receipts = ray.get(list(pending.refs), timeout=self.config.command_timeout_s)
        except (ray.exceptions.RayError, TimeoutError) as err:
            who = self.culprits(pending.refs)
            reason = f"round {pending.round_id}: {who}: {type(err).__name__}: {err}"
            raise self._fail(reason) from err
        try:
            receipt = verify_receipts(
                receipts,
                generation=self.generation,
                round_id=pending.round_id,
                expected_version=pending.expected_version,
                optim_steps=pending.num_steps,
            )
        except ProtocolError as err:
            raise self._fail(str(err)) from err
        self.inflight = None
        self.version = receipt.model_version
        if pending.weights is not None:
            published = PublishedWeights(self.generation, self.version, pending.weights)
            receipt = dataclasses.replace(receipt, published=self.verify_publication(published))
        return receipt

    def step(self, num_steps: int, *, publish: bool = True) -> StepReceipt:
        """Runs one round synchronously; see :meth:`start_round`."""
        return self.finish_round(self.start_round(num_steps, publish=publish))

    def step_on(self, batches_per_rank: list[list[dict[str, np.ndarray]]]) -> StepReceipt:
        """Runs one round on given batches: ``batches_per_rank[rank][step]``."""
        round_id = self._next_round()
        refs = [
            r.step_on.remote(round_id, b, self.generation)
            for r, b in zip(self.ranks, batches_per_rank, strict=True)
        ]
        return self.finish_round(self._issue(len(batches_per_rank[0]), refs))

    def check_generation(self, generation: int, what: str = "publication") -> None:
        """Refuses anything stamped with another generation than this group's.

        Raises:
            StaleGenerationError: Naming both generations.
        """
        if generation != self.generation:
            raise StaleGenerationError(
                f"{what} from generation {generation} refused (current generation "
                f"{self.generation})"
            )

    def verify_publication(self, weights: PublishedWeights) -> PublishedWeights:
        """Checks a publication's generation and, the first time, its tensor schema.

        Raises:
            StaleGenerationError: If ``weights`` come from another generation.
            learner.weights.WeightSchemaError: If the tensors differ from the collectors' policy.
        """
        self.check_generation(weights.generation)
        if not self._schema_checked:
            expected = self.expected_schema or spec_schema(self.model_spec)
            actual = ray.get(self.ranks[0].weights_schema.remote())
            check_schema(actual, expected)
            self._schema_checked = True
        return weights

    def publish(self) -> PublishedWeights:
        """Rank 0 publishes the current weights (checked by :meth:`verify_publication`)."""
        self._ensure_idle()
        version, weights = self.ranks[0].publish.remote(self.generation)
        version = ray.get(version, timeout=self.config.command_timeout_s)
        if version != self.version:
            raise self._fail(f"rank 0 publishes version {version}, the group is at {self.version}")
        return self.verify_publication(PublishedWeights(self.generation, version, weights))

    def parameters(self, rank: int = 0) -> dict:
        """Copies of one rank's policy parameters."""
        return ray.get(self.ranks[rank].parameters.remote())

    def digest(self) -> str:
        """Rank 0's state digest (DDP ranks hold the same state; ``learner.determinism``)."""
        self._ensure_idle()
        return ray.get(self.ranks[0].digest.remote(), timeout=self.config.command_timeout_s)

    def describe(self) -> list[dict]:
        """Each rank's device, backend, world size, generation and version."""
        return ray.get([r.describe.remote() for r in self.ranks])

    # -- state -------------------------------------------------------------------------------
    def state_dicts(self) -> list[dict]:
        """Every rank's state, in rank order (no round may be in flight).

        Each is tensors and plain values (model, optimizer, stepper, scheduler, target network,
        RNG, version, ``meta``): ``torch.save`` it and read it back with
        ``torch.load(weights_only=True)``.
        """
        self._ensure_idle()
        return ray.get(
            [r.state_dict.remote() for r in self.ranks], timeout=self.config.command_timeout_s
        )

    def load_state_dicts(self, states: Sequence[dict]) -> int:
        """Restores :meth:`state_dicts` of any world size; returns the restored version.

        States of this group's world size are restored rank by rank (each rank continues its
        own RNG streams). States of another world size go through
        :func:`learner.ranks.resize.states_for_world_size`: rank 0's model, targets, stepper and
        version serve every rank, with RNG streams derived from this group's seed, generation
        and each rank.

        Raises:
            ValueError: If the states are not one group's ranks in order, or disagree on the
                version (nothing is loaded).
        """
        self._ensure_idle()
        states = states_for_world_size(
            states, self.config.world_size, seed=self.seed, generation=self.generation
        )
        versions = ray.get(
            [r.load_state_dict.remote(s) for r, s in zip(self.ranks, states, strict=True)],
            timeout=self.config.command_timeout_s,
        )
        if len(set(versions)) != 1:
            raise ValueError(f"learner states disagree on the model version: {versions}")
        self.version = versions[0]
        return self.version

    def set_shards(self, shards: Sequence[ray.actor.ActorHandle | str]) -> None:
        """Switches every rank's replay client to ``shards`` (between rounds).

        Each rank drains its sampler, flushes its priority updates to the old shards, drops
        prefetched batches and calls ``ReplayClient.set_shards``.

        Args:
            shards: The new shard handles (or actor names), in shard order.

        Raises:
            ProtocolError: If a round is in flight or the generation has failed.
            ValueError: If ``shards`` is empty.
        """
        self._ensure_idle()
        if not shards:
            raise ValueError("shards: a learner group needs at least one replay shard")
        ray.get(
            [r.set_shards.remote(list(shards)) for r in self.ranks],
            timeout=self.config.command_timeout_s,
        )

    def flush_replay(self) -> None:
        """Waits until every rank's priority updates are applied (before a replay dump)."""
        ray.get(
            [r.flush_replay.remote() for r in self.ranks], timeout=self.config.command_timeout_s
        )

    def shutdown(self) -> None:
        """Leaves the process group, kills the ranks and frees the placement group."""
        with contextlib.suppress(ray.exceptions.RayError, TimeoutError):
            ray.get([r.shutdown.remote() for r in self.ranks], timeout=10)
        for rank in self.ranks:
            ray.kill(rank, no_restart=True)
        remove_placement_group(self.placement_group)
