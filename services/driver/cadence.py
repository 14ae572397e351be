"""When the driver cuts periodic checkpoints and writes progress (pure, no Ray).

:class:`CheckpointCadence`: a checkpoint is due every ``checkpoint.interval_frames`` counted
frames or every ``checkpoint.interval_s`` seconds, whichever comes first. A cut due by frames
moves the next frame mark to the next multiple of the interval above the frames counted (a
receipt that jumps several marks is one cut) and restarts the timer; a cut due by time restarts
the timer only. A resumed run's next frame mark follows from its restored frames
(:meth:`CheckpointCadence.restore`); the mark a checkpoint records (``next_checkpoint_frames``
in ``driver.json``) is informational.

:class:`ProgressCadence`: a progress snapshot every ``controller.log_interval_s`` seconds.

Both take an injectable clock, so their tests step time by hand.

Examples:
    >>> now = [0.0]
    >>> cadence = CheckpointCadence(1000, 60.0, clock=lambda: now[0])
    >>> cadence.due(999), cadence.due(2500), cadence.next_frames
    (False, True, 3000)
    >>> now[0] = 61.0
    >>> cadence.due(2600)
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.config.run import CheckpointConfig


class CheckpointCadence:
    """Periodic checkpoints by frames or by time, whichever first.

    Args:
        interval_frames: Counted frames between checkpoints (0 or None: none by frames).
        interval_s: Seconds between checkpoints (0 or None: none by time).

    Keyword Args:
        clock: Monotonic seconds.

    Attributes:
        next_frames: Frames at which the next checkpoint is due (None: none by frames).
        next_time: ``clock()`` value at which the next checkpoint is due (None: none by time).
    """

    def __init__(
        self,
        interval_frames: int | None,
        interval_s: float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_frames = interval_frames or 0
        self.interval_s = interval_s or 0.0
        self.clock = clock
        self.next_frames: int | None = self.interval_frames or None
        self.next_time: float | None = clock() + self.interval_s if self.interval_s else None

    @classmethod
    def from_config(
        cls, checkpoint: CheckpointConfig, total_frames: int, **kwargs
    ) -> CheckpointCadence:
        """The cadence of a run's ``checkpoint`` section for a budget of ``total_frames``."""
        return cls(checkpoint.frames_interval(total_frames), checkpoint.interval_s, **kwargs)

    def due(self, frames: int) -> bool:
        """Whether a checkpoint is due at ``frames`` counted frames; if so, the next is set."""
        now = self.clock()
        if self.next_time is not None and now >= self.next_time:
            self.next_time = now + self.interval_s
            return True
        if self.next_frames is None or frames < self.next_frames:
            return False
        self.next_frames = self._mark_after(frames)
        if self.next_time is not None:
            self.next_time = now + self.interval_s
        return True

    def restore(self, frames: int) -> None:
        """A resumed run counts ``frames``: the next frame mark is the interval's next multiple."""
        if self.interval_frames:
            self.next_frames = self._mark_after(frames)

    def _mark_after(self, frames: int) -> int:
        return (frames // self.interval_frames + 1) * self.interval_frames


class ProgressCadence:
    """A progress snapshot every ``interval_s`` seconds.

    Args:
        interval_s: Seconds between snapshots (``controller.log_interval_s``).

    Keyword Args:
        clock: Monotonic seconds.
    """

    def __init__(
        self, interval_s: float, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.next_at = 0.0  # before start(): the first call is due

    def start(self) -> None:
        """Training starts: the first snapshot is due one interval from now."""
        self.next_at = self.clock() + self.interval_s

    def take(self, *, force: bool = False) -> bool:
        """Whether a snapshot is due now (always with ``force``); if so, the next is set."""
        now = self.clock()
        if not force and now < self.next_at:
            return False
        self.next_at = now + self.interval_s
        return True
