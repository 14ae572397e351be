"""Messages produced by the learner group."""

from __future__ import annotations

import dataclasses

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
        published: Weights after the round (rank 0 only, when asked to publish).
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


class ProtocolError(RuntimeError):
    """Receipts that break the step protocol: the generation is failed."""


def verify_receipts(
    receipts: list[StepReceipt], *, generation: int, round_id: int, expected_version: int
) -> StepReceipt:
    """Checks that all ranks answered the same round with the expected version.

    Args:
        receipts: One receipt per rank, in rank order.
        generation: The generation the round was issued to.
        round_id: The round's id.
        expected_version: Previous model version plus the steps asked for.

    Returns:
        Rank 0's receipt.

    Raises:
        ProtocolError: On any disagreement, naming what differed.
    """
    for receipt in receipts:
        if receipt.generation != generation:
            raise ProtocolError(
                f"rank {receipt.rank} answered generation {receipt.generation}, "
                f"expected {generation}"
            )
        if receipt.round_id != round_id:
            raise ProtocolError(
                f"rank {receipt.rank} answered round {receipt.round_id}, expected {round_id}"
            )
        if receipt.model_version != expected_version:
            raise ProtocolError(
                f"rank {receipt.rank} reports model version {receipt.model_version}, "
                f"expected {expected_version}"
            )
    return receipts[0]
