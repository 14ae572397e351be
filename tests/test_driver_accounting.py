"""Frame accounting and hooks of the driver, pure (no Ray)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from collector.receipts import RolloutReceipt
from learner.receipts import StepReceipt
from replay.wire.batches import ExternalReceipt
from services.config import load_config
from services.driver.accounting import Accounting, ReturnGoals
from services.driver.hooks import EVENTS, Hooks


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def rollout(frames: int, returns=(), lengths=None) -> RolloutReceipt:
    lengths = tuple(lengths if lengths is not None else [10] * len(returns))
    return RolloutReceipt(0, 0, frames, tuple(returns), lengths, 0, 0, (), 0.0, 0.0)


def external(frames: int, returns=()) -> ExternalReceipt:
    return ExternalReceipt("a", 0, frames, tuple(returns), (10,) * len(returns), None)


def accounting(frame_skip: int = 1, **goals) -> Accounting:
    goals.setdefault("episode_window", 2)
    return Accounting(frame_skip, ReturnGoals(**goals), clock=Clock(), wall_clock=Clock(1e9))


def test_rollout_frames_are_counted_times_frame_skip():
    acc = accounting(frame_skip=4)
    assert acc.count(rollout(100)) is None
    acc.count(rollout(50, returns=[1.0]))
    c = acc.counters
    assert (c.collected_frames, c.transitions, c.rollouts, c.episodes) == (600, 150, 2, 1)
    assert c.external_frames == 0
    assert acc.first_rollout_at == 1e9  # stamped by the first rollout receipt


def test_external_frames_count_like_a_rollout_and_apart():
    acc = accounting(frame_skip=4)
    acc.count(external(25, returns=[3.0]), external=True)
    acc.count(rollout(25))
    c = acc.counters
    assert (c.collected_frames, c.external_frames, c.transitions) == (200, 100, 50)
    assert (c.rollouts, c.episodes) == (1, 1)
    only_external = accounting()
    only_external.count(external(5), external=True)
    assert only_external.first_rollout_at is None  # start-up is timed to a collector's receipt


def test_episode_window_keeps_the_last_episodes():
    acc = accounting(episode_window=3)
    assert math.isnan(acc.episodes.return_mean)
    acc.count(rollout(10, returns=[1.0, 2.0], lengths=[5, 7]))
    acc.count(rollout(10, returns=[3.0, 6.0], lengths=[9, 11]))
    assert list(acc.episodes.returns) == [2.0, 3.0, 6.0]
    assert acc.episodes.return_mean == pytest.approx(11 / 3)
    assert acc.episodes.length_mean == pytest.approx(9.0)
    assert acc.counters.episodes == 4


def test_milestones_are_recorded_once_at_their_first_crossing():
    acc = accounting(episode_window=2, milestones=(10.0, 20.0))
    clock = acc.clock
    acc.count(rollout(10, returns=[50.0]))
    assert acc.milestones == {}  # the window is not full yet
    clock.now = 3.0
    acc.count(rollout(10, returns=[12.0]))  # mean 31: both thresholds crossed at once
    assert set(acc.milestones) == {10.0, 20.0}
    first = dict(acc.milestones[10.0])
    assert first["frames"] == 20 and first["wall_s"] == 3.0
    clock.now = 9.0
    acc.count(rollout(10, returns=[0.0, 0.0]))  # below, then above again
    acc.count(rollout(10, returns=[40.0, 40.0]))
    assert acc.milestones[10.0] == first  # the first crossing stays


def test_stop_return_gives_a_reason_once_the_window_mean_reaches_it():
    acc = accounting(episode_window=2, stop_return=100.0)
    assert acc.count(rollout(10, returns=[200.0])) is None  # one episode: the window is not full
    assert acc.count(rollout(10, returns=[0.0])) == "running mean return 100.0 reached stop_return"
    acc = accounting(episode_window=2, stop_return=100.0)
    acc.count(rollout(10, returns=[90.0]))
    assert acc.count(rollout(10, returns=[99.0])) is None  # mean 94.5
    # An external actor's returns steer nothing (grpc.external_returns_steer: false).
    assert acc.count(external(10, returns=[1e6]), external=True) is None
    reason = acc.count(rollout(10, returns=[120.0]))  # mean 109.5
    assert reason == "running mean return 109.5 reached stop_return"
    assert acc.count(rollout(10)) == reason  # still reached: the controller stops once
    assert accounting(episode_window=1).count(rollout(1, returns=[1e9])) is None  # no goal


def test_rounds_count_steps_skipped_steps_and_the_version():
    acc = accounting()
    acc.count_round(StepReceipt(0, 0, 0, 8, 8, {"nonfinite_skipped": 0.25}, 64, 0.0, 0.0))
    acc.count_round(StepReceipt(0, 1, 0, 4, 12, {"loss": 1.0}, 32, 0.0, 0.0))
    c = acc.counters
    assert (c.optim_steps, c.nonfinite_steps, c.model_version, c.rounds) == (12, 2, 12, 2)


def test_state_round_trips_in_the_driver_json_layout():
    acc = accounting(episode_window=2, milestones=(5.0,))
    acc.count(rollout(10, returns=[6.0, 7.0]))
    state = acc.state_dict()
    assert list(state) == ["counters", "episode_returns", "episode_lengths", "milestones"]
    assert state["milestones"] == {"5.0": acc.milestones[5.0]}
    restored = accounting(episode_window=2, milestones=(5.0,))
    restored.load_state_dict({**state, "next_checkpoint_frames": 30})
    assert restored.counters == acc.counters and restored.milestones == acc.milestones
    assert list(restored.episodes.returns) == [6.0, 7.0]


def test_goals_come_from_the_controller_section():
    ctrl = load_config(
        overrides=["controller.stop_return=195", "controller.episode_window=5"]
    ).controller
    goals = ReturnGoals.from_config(ctrl)
    assert goals == ReturnGoals(5, tuple(ctrl.return_milestones), 195.0)


def test_hooks_call_subject_and_args_in_registration_order():
    hooks = Hooks(subject := SimpleNamespace(name="run"))
    calls = []
    hooks.register("round", lambda run, receipt: calls.append(("a", run, receipt)))
    hooks.register("round", lambda run, receipt: calls.append(("b", run, receipt)))
    hooks.emit("round", 7)
    hooks.emit("setup")  # no hook registered: nothing happens
    assert calls == [("a", subject, 7), ("b", subject, 7)]
    assert "round" in EVENTS and len(set(EVENTS)) == len(EVENTS)
    with pytest.raises(ValueError, match="unknown event 'rounds'"):
        hooks.register("rounds", print)
