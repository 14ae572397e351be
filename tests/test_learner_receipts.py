"""Receipt verification: ranks must agree, or the round fails (no Ray)."""

import dataclasses

import pytest

from learner.receipts import ProtocolError, PublishedWeights, StepReceipt, verify_receipts


def receipts(world_size=2):
    return [
        StepReceipt(
            generation=3,
            round_id=7,
            rank=rank,
            optim_steps=4,
            model_version=12,
            metrics={"loss_q": 0.5, "grad_norm": 1.25},
            samples=64,
            sample_s=0.01,
            train_s=0.02,
        )
        for rank in range(world_size)
    ]


def verify(items):
    return verify_receipts(items, generation=3, round_id=7, expected_version=12, optim_steps=4)


def test_agreeing_receipts_return_rank_zero():
    items = receipts()
    items[0] = dataclasses.replace(items[0], published=PublishedWeights(3, 12, None))
    assert verify(items) is items[0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"generation": 2}, "rank 1 answered generation 2, expected 3"),
        ({"round_id": 6}, "rank 1 answered round 6, expected 7"),
        ({"optim_steps": 3}, "rank 1 did 3 optimizer steps, expected 4"),
        ({"model_version": 11}, "rank 1 reports model version 11, expected 12"),
        ({"samples": 32}, "rank 1 drew 32 samples, rank 0 drew 64"),
        ({"metrics": {"loss_q": 0.6, "grad_norm": 1.25}}, "rank 1 reports metrics"),
        ({"metrics": {"loss_q": 0.5}}, "rank 1 reports metrics"),
        ({"published": PublishedWeights(3, 12, None)}, "only rank 0 publishes"),
        ({"rank": 0}, "rank 0 answered in position 1"),
    ],
)
def test_disagreeing_receipts_fail_the_round(change, message):
    items = receipts()
    items[1] = dataclasses.replace(items[1], **change)
    with pytest.raises(ProtocolError, match=message):
        verify(items)


def test_no_receipts_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="no receipts"):
        verify([])
