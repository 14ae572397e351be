"""The controller satisfies the typed views its parts read; the driver state keeps its layout.

An actor-less controller (no Ray cluster): nothing here starts an actor.
"""

from __future__ import annotations

import inspect
import json

import pytest

from collector.receipts import RolloutReceipt
from replay.wire.batches import ExternalReceipt
from services.checkpoints.cut import driver_state, load_driver_state
from services.config import load_config
from services.driver import views
from services.driver.controller import Controller
from services.driver.loops import LOOPS
from services.observe import report

VIEWS = [
    view
    for _, view in inspect.getmembers(views, inspect.isclass)
    if view.__module__ == views.__name__ and view is not views.Loop
]


def controller(*overrides: str) -> Controller:
    config = load_config(
        overrides=[
            "collector.num_collectors=0",
            "grpc.port=0",
            "controller.total_frames=4000",
            "controller.episode_window=1",
            "controller.return_milestones=[10]",
            *overrides,
        ]
    )
    return Controller(config)


def rollout(frames: int, returns=()) -> RolloutReceipt:
    lengths = (10,) * len(returns)
    return RolloutReceipt(0, 0, frames, tuple(returns), lengths, 0, 0, (), 0.0, 0.0)


@pytest.fixture(scope="module")
def plain() -> Controller:
    return controller()


@pytest.mark.parametrize("view", VIEWS, ids=lambda view: view.__name__)
def test_the_controller_satisfies_every_view(plain, view):
    assert isinstance(plain, view)


def test_every_loop_is_a_loop(plain):
    assert VIEWS and all(isinstance(loop(plain), views.Loop) for loop in LOOPS.values())


def test_views_name_less_than_the_controller(plain):
    for view in (views.ReportView, views.CutView, views.RecoveryView, views.InboxView):
        members = {name for name in dir(view) if not name.startswith("_")}
        members |= set(view.__annotations__)
        assert members < {name for name in dir(plain) if not name.startswith("_")}, view


def test_driver_state_keeps_its_layout_and_restores():
    ctrl = controller("checkpoint.interval_frames=1000", "controller.stop_return=50")
    ctrl.accounting.count(rollout(1500, returns=[20.0]))
    ctrl.cadence.due(ctrl.counters.collected_frames)
    state = json.loads(json.dumps(driver_state(ctrl)))
    assert list(state) == [
        "counters",
        "episode_returns",
        "episode_lengths",
        "milestones",
        "next_checkpoint_frames",
        "elapsed_s",
        "loop",
        "evaluation",
        "run_id",
        "lineage",
    ]
    assert state["next_checkpoint_frames"] == 2000 and list(state["milestones"]) == ["10.0"]
    resumed = controller("checkpoint.interval_frames=1000")
    load_driver_state(resumed, state)
    assert resumed.counters == ctrl.counters and resumed.accounting.milestones == {
        10.0: state["milestones"]["10.0"]
    }
    assert resumed.cadence.next_frames == 2000 and resumed.lineage == [ctrl.run_id]
    summary = report.summary(resumed)
    assert summary["frames"] == 1500 and summary["return_milestones"]["10"]["frames"] == 1500


def test_stop_return_stops_the_run_once_with_its_reason():
    ctrl = controller("controller.stop_return=15", "grpc.external_returns_steer=true")
    ctrl.count_external(ExternalReceipt("a", 0, 10, (10.0,), (10,), None))
    assert not ctrl.stop_requested
    ctrl.count_external(ExternalReceipt("a", 1, 10, (20.0,), (10,), None))
    assert ctrl.stop_requested
    assert ctrl.stop_reason == "running mean return 20.0 reached stop_return"
    assert ctrl.counters.external_frames == 20
