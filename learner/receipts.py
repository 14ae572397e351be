"""Messages produced by the learner group."""

from __future__ import annotations

import dataclasses
import math

import ray


@dataclasses.dataclass(frozen=True)
class PublishedWeights:
    """A publication of the policy's weights.

    Attributes:
        generation: Learner generation that produced the weights.
        version: Model version (optimizer steps in this lineage) of the weights.
        ref: Object-store reference to a ``dict[str, torch.Tensor]`` state dict (CPU, detached).
    """

    generation: int
    version: int
    ref: ray.ObjectRef

    @property
    def key(self) -> tuple[int, int]:
        """Publication order: newer weights have a larger ``(generation, version)``."""
        return self.generation, self.version


@dataclasses.dataclass(frozen=True)
class StepReceipt:
    """One rank's answer to one learner round.

    Attributes:
        generation: Learner generation.
        round_id: Sequential id of the round within the generation.
        rank: The rank that answers.
        optim_steps: Optimizer steps done in this round.
        model_version: Model version after the round.
        metrics: Scalar metrics averaged over the round's steps and over ranks.
        samples: Transitions this rank drew from replay in this round.
        sample_s: Seconds spent waiting for samples.
        train_s: Seconds spent in forward, backward and optimizer steps.
        published: Weights after the round, when asked to publish (set by the group from rank
            0's reply; ranks answer without it).
        publish_s: Seconds spent extracting and putting the weights.
        finished_at: Wall-clock time (``time.time()``) when the rank finished the round.
        lags: Asynchronous rounds (``EpochPlan.max_policy_lag``): the chunks taken, counted by
            policy lag (index ``k``: acted ``k`` versions behind the learner; the last index
            counts those beyond ``max_policy_lag``, the dropped ones), summed over the ranks.
    """

    generation: int
    round_id: int
    rank: int
    optim_steps: int
    model_version: int
    metrics: dict[str, float]
    samples: int
    sample_s: float
    train_s: float
    published: PublishedWeights | None = None
    publish_s: float = 0.0
    finished_at: float = 0.0
    lags: tuple[int, ...] = ()


class ProtocolError(RuntimeError):
    """Receipts that break the step protocol: the generation is failed."""


class StaleGenerationError(ProtocolError):
    """A round or publication from another generation than the group's current one."""


def verify_receipts(
    receipts: list[StepReceipt],
    *,
    generation: int,
    round_id: int,
    expected_version: int,
    optim_steps: int | None = None,
) -> StepReceipt:
    """Checks that all ranks answered the same round alike, with the expected version.

    Ranks must answer in rank order, for the generation and round asked, with
    ``optim_steps`` steps, version ``expected_version``, the same number of samples and the same
    (all-reduced) metrics; only rank 0 may carry a publication.

    Args:
        receipts: One receipt per rank, in rank order.
        generation: The generation the round was issued to.
        round_id: The round's id.
        expected_version: Previous model version plus the steps asked for.
        optim_steps: Steps asked for (not checked when None).

    Returns:
        Rank 0's receipt.

    Raises:
        ProtocolError: On any disagreement, naming the rank and what differed.
    """
    if not receipts:
        raise ProtocolError(f"round {round_id}: no receipts")
    first = receipts[0]
    for index, receipt in enumerate(receipts):
        who = f"rank {receipt.rank}"
        checks = [
            (receipt.rank == index, f"answered in position {index}"),
            (
                receipt.generation == generation,
                f"answered generation {receipt.generation}, expected {generation}",
            ),
            (
                receipt.round_id == round_id,
                f"answered round {receipt.round_id}, expected {round_id}",
            ),
            (
                optim_steps is None or receipt.optim_steps == optim_steps,
                f"did {receipt.optim_steps} optimizer steps, expected {optim_steps}",
            ),
            (
                receipt.model_version == expected_version,
                f"reports model version {receipt.model_version}, expected {expected_version}",
            ),
            (
                receipt.samples == first.samples,
                f"drew {receipt.samples} samples, rank {first.rank} drew {first.samples}",
            ),
            (
                receipt.published is None or index == 0,
                "published weights (only rank 0 publishes)",
            ),
            (
                _same_metrics(receipt.metrics, first.metrics),
                f"reports metrics {receipt.metrics}, rank {first.rank} {first.metrics}",
            ),
        ]
        for ok, problem in checks:
            if not ok:
                raise ProtocolError(f"round {round_id} of generation {generation}: {who} {problem}")
    return first


def _same_metrics(a: dict[str, float], b: dict[str, float]) -> bool:
    if a.keys() != b.keys():
        return False
    return all(
        (math.isnan(a[k]) and math.isnan(b[k]))
        or math.isclose(a[k], b[k], rel_tol=1e-6, abs_tol=1e-9)
        for k in a
    )
