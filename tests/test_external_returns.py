"""An actor credential cannot steer the run with made-up episode returns.

The batch proves at most one finished episode per transition that ends one (refused beyond,
on a real shard intake server); the returns that pass are kept apart from the collectors' and
stop nothing (``controller.stop_return``, milestones, early stopping, keep-best) unless the
operator opts in with ``grpc.external_returns_steer``. The driver's controller is built for real
(no Ray is needed to count a receipt).
"""

from __future__ import annotations

import numpy as np

from replay.receipts import WriteReceipt
from replay.wire.batches import ExternalReceipt
from services.config import load_config
from services.driver.controller import Controller
from services.grpc.client import RelayClient
from tests.grpc_probe import transitions
from tests.test_grpc_writers import ACTOR, insert, shard  # noqa: F401  (a fixture)

GOALS = [
    "controller.stop_return=100",
    "controller.episode_window=2",
    "controller.return_milestones=[50]",
    "controller.early_stop_metric=episode_return_mean",
    "controller.early_stop_patience_frames=1",
]


def fabricated(frames: int, returns: tuple[float, ...]) -> ExternalReceipt:
    write = WriteReceipt(0, "external/a", 0, np.arange(frames), frames)
    return ExternalReceipt("a", 0, frames, returns, (1,) * len(returns), write)


def test_a_batch_reports_no_more_episodes_than_it_ends(shard):  # noqa: F811
    with RelayClient(shard["address"], token=ACTOR) as client:
        one = transitions(1)
        many = client.batch(one, seq=0, episode_returns=[500.0] * 65_536,
                            episode_lengths=[1] * 65_536)  # fmt: skip
        code, details, _ = insert(client, many)
        assert code == "INVALID_ARGUMENT" and "episode_returns" in details, details
        assert len(shard["table"]) == 0
        ended = transitions(8)
        ended["terminated"][7] = True
        two = client.batch(ended, seq=0, episode_returns=[9.0, 9.0], episode_lengths=[4, 4])
        assert insert(client, two)[0] == "INVALID_ARGUMENT"
        good = client.batch(ended, seq=0, episode_returns=[9.0], episode_lengths=[8])
        assert insert(client, good)[0] == "OK" and len(shard["table"]) == 8


def test_fabricated_external_returns_cannot_stop_the_run():
    controller = Controller(load_config(None, GOALS))
    for _ in range(4):
        controller.count_external(fabricated(8, (1e6,)))
    assert not controller.stop_requested
    assert controller.accounting.milestones == {}
    assert len(controller.accounting.episodes.returns) == 0  # the running window: untouched
    assert controller.accounting.external_episodes.return_mean == 1e6  # reported apart
    assert controller.accounting.counters.external_frames == 32
    # The operator may let them steer.
    trusting = Controller(load_config(None, [*GOALS, "grpc.external_returns_steer=true"]))
    trusting.count_external(fabricated(8, (1e6,)))
    trusting.count_external(fabricated(8, (1e6,)))
    assert trusting.stop_requested and "stop_return" in (trusting.stop_reason or "")
