"""The driver's inbox with a real (actor-less) controller: counting, pacing, cuts, stop (no Ray)."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np
import pytest

from replay.receipts import WriteReceipt
from replay.wire.batches import ExternalReceipt
from services.config import load_config
from services.driver.controller import Controller
from services.driver.inbox import IntakeClosed


def controller(*overrides: str) -> Controller:
    config = load_config(
        overrides=[
            "collector.num_collectors=0",
            "grpc.port=0",
            "controller.total_frames=1000",
            "controller.init_random_frames=100",
            "controller.max_lag_steps=10",
            "learner.global_batch_size=32",
            *overrides,
        ]
    )
    ctrl = Controller(config)
    ctrl.inbox.enable(ctrl)
    ctrl.emit("setup")
    return ctrl


def receipt(frames: int, seq: int, *, duplicate: bool = False) -> ExternalReceipt:
    write = WriteReceipt(0, "external/a", seq, np.arange(frames), frames, duplicate=duplicate)
    return ExternalReceipt("a", seq, 0 if duplicate else frames, (5.0,), (5,), write)


def deliver(ctrl: Controller, frames: int, seq: int, **kwargs) -> Future:
    """What an Insert handler does for one batch: begin, (shard write), acknowledge."""
    ctrl.inbox.begin_write(timeout=5)
    counted: Future = Future()
    ctrl.inbox.acknowledged(receipt(frames, seq, **kwargs), counted)
    return counted


def test_receipts_are_counted_by_the_driver_once():
    ctrl = controller()
    counted = deliver(ctrl, 60, 0)
    duplicate = deliver(ctrl, 60, 0, duplicate=True)
    assert ctrl.counters.collected_frames == 0  # nothing until the driver polls
    ctrl.inbox.poll(ctrl)
    assert counted.result(0) == duplicate.result(0) == 60
    c = ctrl.counters
    assert (c.collected_frames, c.external_frames, c.transitions, c.episodes) == (60, 60, 60, 1)
    assert ctrl.inbox.status["collected_frames"] == 60 and ctrl.inbox.state == "running"


def test_writes_wait_while_learners_trail_and_during_a_cut():
    ctrl = controller()
    deliver(ctrl, 200, 0)
    ctrl.inbox.poll(ctrl)  # 100 learnable frames at UTD 0.5: 50 steps owed > max_lag_steps 10
    with pytest.raises(TimeoutError, match="held"):
        ctrl.inbox.begin_write(timeout=0.05)
    ctrl.counters.optim_steps = 50
    ctrl.inbox.poll(ctrl)
    ctrl.inbox.begin_write(timeout=1)  # open again
    released = threading.Event()

    def cut():
        with ctrl.inbox.barrier(ctrl):  # waits for the write in flight
            assert ctrl.counters.collected_frames == 230  # counted before the cut
            with pytest.raises(TimeoutError):
                ctrl.inbox.begin_write(timeout=0.05)  # new writes are held during the cut
        released.set()

    thread = threading.Thread(target=cut)
    thread.start()
    assert not released.wait(0.1)  # the cut waits for the acknowledgement
    ctrl.inbox.acknowledged(receipt(30, 1))
    thread.join(10)
    assert released.is_set()


def test_budget_closes_the_intake_and_stop_requests_resolve_at_shutdown():
    ctrl = controller("controller.utd_ratio=0")
    deliver(ctrl, 1000, 0)
    assert ctrl.inbox.wait(ctrl, 0.01) is False  # budget reached: the loop may end
    assert ctrl.inbox.state == "stopping"
    with pytest.raises(IntakeClosed, match="stopping"):
        ctrl.inbox.begin_write(timeout=1)
    stopped = ctrl.inbox.request_stop("test")
    ctrl.inbox.poll(ctrl)
    assert ctrl.stop_requested and ctrl.stop_reason == "test"
    ctrl.emit("shutdown")
    assert stopped.result(0) == "" and ctrl.inbox.state == "stopped"
    with pytest.raises(IntakeClosed):
        ctrl.inbox.request_checkpoint()


def test_checkpoint_requests_are_served_in_the_loop():
    ctrl = controller()
    future = ctrl.inbox.request_checkpoint()
    ctrl.inbox.poll(ctrl)
    assert future.result(0) is None  # this controller has checkpoints off
