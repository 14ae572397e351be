"""Accounting: what the driver counts from receipts (pure, no Ray, no torch).

Frames are counted once, from receipts, never from replay write counts (``docs/architecture.md``). A
collector's ``RolloutReceipt`` and an external actor's ``ExternalReceipt`` (gRPC) are counted by
the same :meth:`Accounting.count`: ``collected_frames += frames * frame_skip``,
``transitions += frames``, finished episodes into the running window; a rollout also counts
in ``rollouts`` (and the first one stamps ``first_rollout_at``), an external batch in
``external_frames``. An external actor's episode returns are only as true as its word: they
go to a window of their own (``external_episodes``, reported as ``external_return_mean``) and
steer nothing, unless the operator opts in (``grpc.external_returns_steer``: then they join the
running window like a collector's). After each receipt the running mean return is checked
against the return goals: the first crossing of each of ``controller.return_milestones`` is
recorded (frames, and seconds since training and since this process started), and reaching
``controller.stop_return`` yields a stop reason for the caller to act on. A learner round's
``StepReceipt`` is counted by :meth:`Accounting.count_round` (optimizer steps, skipped
non-finite steps, the model version).

Examples:
    >>> from types import SimpleNamespace
    >>> accounting = Accounting(frame_skip=4, goals=ReturnGoals(episode_window=1, stop_return=9))
    >>> receipt = SimpleNamespace(frames=10, episode_returns=(9.5,), episode_lengths=(10,))
    >>> accounting.count(receipt)
    'running mean return 9.5 reached stop_return'
    >>> accounting.counters.collected_frames, accounting.counters.transitions
    (40, 10)
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from services.driver.stats import EpisodeWindow, RunCounters
from services.observe.clock import process_start_time

if TYPE_CHECKING:
    from learner.receipts import StepReceipt
    from services.config.run import ControllerConfig


class Receipt(Protocol):
    """What accounting reads of a receipt (``RolloutReceipt`` or ``ExternalReceipt``)."""

    @property
    def frames(self) -> int:
        """Transitions stored (agent steps, before ``frame_skip``)."""

    @property
    def episode_returns(self) -> Sequence[float]:
        """Returns of the episodes that finished."""

    @property
    def episode_lengths(self) -> Sequence[int]:
        """Their lengths."""


@dataclasses.dataclass(frozen=True)
class ReturnGoals:
    """Returns the running mean is watched for.

    Attributes:
        episode_window: Episodes in the running mean; no goal is checked before it is full.
        milestones: Returns whose first crossing is recorded.
        stop_return: Return at which the run should stop (None: never).
    """

    episode_window: int
    milestones: tuple[float, ...] = ()
    stop_return: float | None = None

    @classmethod
    def from_config(cls, controller: ControllerConfig) -> ReturnGoals:
        """The goals of a run's ``controller`` section."""
        return cls(
            controller.episode_window, tuple(controller.return_milestones), controller.stop_return
        )


class Accounting:
    """The driver's counters, episode window and return milestones, fed by receipts.

    Args:
        frame_skip: Env frames per agent step (``collector.frame_skip``).
        goals: The return milestones and ``stop_return``.

    Keyword Args:
        external_steer: External actors' episode returns join the running window (and so
            steer ``stop_return``, milestones, early stopping and keep-best); else they are
            kept in ``external_episodes`` apart.
        clock: Monotonic seconds for ``started_at`` and milestones' ``wall_s``.
        wall_clock: Unix seconds for ``first_rollout_at`` and milestones' ``process_s``.

    Attributes:
        counters: The run's :class:`RunCounters` (replaced whole on restore).
        episodes: The running window of episode returns and lengths.
        external_episodes: The window of external actors' episodes (when they do not steer).
        milestones: First crossing of each milestone return: ``frames``, ``wall_s``, ``process_s``.
        first_rollout_at: Unix time of the first counted rollout receipt (None before).
        started_at: ``clock()`` when training started (:meth:`start`).
    """

    def __init__(
        self,
        frame_skip: int,
        goals: ReturnGoals,
        *,
        external_steer: bool = False,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.frame_skip = frame_skip
        self.external_steer = external_steer
        self.external_episodes = EpisodeWindow(goals.episode_window)
        self.goals = goals
        self.clock = clock
        self.wall_clock = wall_clock
        self.counters = RunCounters()
        self.episodes = EpisodeWindow(goals.episode_window)
        self.milestones: dict[float, dict] = {}
        self.first_rollout_at: float | None = None
        self.started_at = clock()
        self._stop_reason: str | None = None  # of the last check of the goals

    def start(self) -> None:
        """Training starts now (``elapsed_s`` and milestones' ``wall_s`` count from here)."""
        self.started_at = self.clock()

    def elapsed_s(self) -> float:
        """Seconds since training started."""
        return self.clock() - self.started_at

    def count(self, receipt: Receipt, *, external: bool = False) -> str | None:
        """Counts one receipt's frames and episodes, then checks the return goals.

        Args:
            receipt: A collector's rollout receipt, or an external actor's (``external``).
            external: The frames came from an actor outside Ray (gRPC).

        Returns:
            Why the run should stop (``stop_return`` reached), or None.
        """
        c = self.counters
        frames = receipt.frames * self.frame_skip
        c.collected_frames += frames
        c.transitions += receipt.frames
        c.invalid_actions += getattr(receipt, "invalid_actions", 0)
        if external:
            c.external_frames += frames
        else:
            c.rollouts += 1
            if self.first_rollout_at is None:
                self.first_rollout_at = self.wall_clock()
        if receipt.episode_returns and external and not self.external_steer:
            c.episodes += len(receipt.episode_returns)  # counted; they steer nothing
            self.external_episodes.extend(receipt.episode_returns, receipt.episode_lengths)
        elif receipt.episode_returns:  # else the running mean did not move: nor did the goals
            c.episodes += len(receipt.episode_returns)
            self.episodes.extend(receipt.episode_returns, receipt.episode_lengths)
            self._stop_reason = self._check_goals()
        return self._stop_reason

    def count_round(self, receipt: StepReceipt) -> None:
        """Counts a finished learner round: optimizer steps (and skipped ones), the version."""
        c = self.counters
        c.optim_steps += receipt.optim_steps
        skipped = receipt.metrics.get("nonfinite_skipped", 0.0)  # a fraction of the round
        c.nonfinite_steps += round(skipped * receipt.optim_steps)
        c.model_version = receipt.model_version
        c.rounds += 1

    def _check_goals(self) -> str | None:
        goals = self.goals
        mean = self.episodes.return_mean
        if math.isnan(mean) or len(self.episodes.returns) < goals.episode_window:
            return None
        for threshold in goals.milestones:
            if mean >= threshold and threshold not in self.milestones:
                self.milestones[threshold] = {
                    "frames": self.counters.collected_frames,
                    "wall_s": round(self.elapsed_s(), 3),
                    "process_s": round(self.wall_clock() - process_start_time(), 3),
                }
        if goals.stop_return is not None and mean >= goals.stop_return:
            return f"running mean return {mean:.1f} reached stop_return"
        return None

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The counted part of the driver's checkpoint (keys as in ``driver.json``)."""
        return {
            "counters": dataclasses.asdict(self.counters),
            "episode_returns": list(self.episodes.returns),
            "episode_lengths": list(self.episodes.lengths),
            "milestones": {str(k): v for k, v in self.milestones.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (extra keys of ``driver.json`` are ignored)."""
        self.counters = RunCounters(**state["counters"])
        self.episodes.extend(state["episode_returns"], state["episode_lengths"])
        self.milestones = {float(k): v for k, v in state["milestones"].items()}
        self._stop_reason = self._check_goals()
