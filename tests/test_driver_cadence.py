"""Checkpoint and progress cadence of the driver, pure, on a hand-moved clock (no Ray)."""

from __future__ import annotations

from services.config import load_config
from services.driver.cadence import CheckpointCadence, ProgressCadence


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_frames_cadence_skips_to_the_next_multiple_above_the_frames():
    cadence = CheckpointCadence(1000, 0, clock=Clock())
    assert cadence.next_time is None
    assert not cadence.due(999)
    assert cadence.due(1000) and cadence.next_frames == 2000
    assert not cadence.due(1999)
    assert cadence.due(4500) and cadence.next_frames == 5000  # one cut for three marks
    assert not cadence.due(4999)


def test_time_cadence_restarts_the_timer_and_keeps_the_frame_mark():
    clock = Clock(100.0)
    cadence = CheckpointCadence(1000, 60.0, clock=clock)
    assert cadence.next_time == 160.0 and not cadence.due(10)
    clock.now = 160.0
    assert cadence.due(1500)  # due by time: the frame mark stays where it was
    assert cadence.next_time == 220.0 and cadence.next_frames == 1000
    clock.now = 170.0
    assert cadence.due(1500)  # now due by frames: the timer restarts too
    assert cadence.next_frames == 2000 and cadence.next_time == 230.0
    assert not cadence.due(1999)


def test_whichever_first_and_off():
    clock = Clock()
    by_time = CheckpointCadence(0, 10.0, clock=clock)
    assert by_time.next_frames is None and not by_time.due(10**9)
    clock.now = 10.0
    assert by_time.due(0)
    off = CheckpointCadence(None, None, clock=clock)
    clock.now = 1e9
    assert not off.due(10**12)


def test_restore_moves_the_frame_mark_past_the_restored_frames():
    cadence = CheckpointCadence(1000, 0, clock=Clock())
    cadence.restore(2500)
    assert cadence.next_frames == 3000 and not cadence.due(2999) and cadence.due(3000)
    off = CheckpointCadence(0, 0, clock=Clock())
    off.restore(2500)
    assert off.next_frames is None


def test_cadence_from_the_checkpoint_section():
    config = load_config(overrides=["checkpoint.interval_s=30"])
    cadence = CheckpointCadence.from_config(config.checkpoint, 4000, clock=Clock(5.0))
    assert cadence.next_frames == 1000 and cadence.next_time == 35.0  # a quarter of the budget


def test_progress_is_due_once_per_interval_or_when_forced():
    clock = Clock(10.0)
    progress = ProgressCadence(5.0, clock=clock)
    assert progress.take()  # before start: due at once
    progress.start()
    assert not progress.take()
    clock.now = 14.9
    assert not progress.take()
    assert progress.take(force=True)  # forced: due, and the next one is an interval later
    clock.now = 19.8
    assert not progress.take()
    clock.now = 19.9
    assert progress.take() and progress.next_at == 24.9
