"""The typed payloads a :class:`~services.run.trainer.Trainer` hands its callbacks.

``Trainer.register(event, callback)`` calls ``callback(payload)`` at the driver loop's boundaries
(on the driver's thread, never inside the learners' loop). The payload is one small frozen
dataclass per event, not the controller:

    * ``setup``: :class:`RunStarted` (actors started, state restored, version 0 published);
    * ``rollout``: ``collector.receipts.RolloutReceipt`` (one counted rollout);
    * ``round``: ``learner.receipts.StepReceipt`` (one finished learner round, rank 0's);
    * ``progress``: :class:`Progress` (every ``controller.log_interval_s``, and after each
      evaluation);
    * ``checkpoint``: :class:`CheckpointSaved`;
    * ``train_end``: :class:`TrainEnded` (the loop is done; before the final checkpoint).

Examples:
    >>> snapshot = {"frames": 1000, "total_frames": 5000, "optim_steps": 40,
    ...             "model_version": 40, "episodes": 30, "episode_return_mean": float("nan"),
    ...             "frames_per_s": 900.0, "elapsed_s": 1.1, "learner": {"loss_q": 0.5}}
    >>> progress = Progress.from_snapshot("run-1", snapshot)
    >>> progress.frames, progress.episode_return_mean, progress.learner["loss_q"]
    (1000, None, 0.5)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class RunStarted:
    """The run is set up.

    Attributes:
        run_id: The run's id.
        frames: Frames collected so far (above 0 when resumed).
        model_version: The model version published to collectors.
    """

    run_id: str
    frames: int
    model_version: int


@dataclasses.dataclass(frozen=True)
class Progress:
    """A progress snapshot of the run (what a progress line and ``metrics.jsonl`` show).

    Attributes:
        run_id: The run's id.
        frames: Frames collected (counted from receipts, times ``frame_skip``).
        total_frames: The run's frame budget.
        optim_steps: Optimizer steps done.
        model_version: The learners' model version.
        episodes: Episodes finished by the collectors.
        episode_return_mean: Mean return of the recent training episodes (None before any).
        frames_per_s: Collection rate.
        elapsed_s: Seconds since training started.
        learner: The last learner round's scalar metrics (``loss_q``, ``lr``, ...).
        evaluation: The last greedy evaluation's record (``episode_return_mean``, ``version``,
            ...), None before any.
        snapshot: The whole snapshot dict (``services.observe.report.snapshot``).
    """

    run_id: str
    frames: int
    total_frames: int
    optim_steps: int
    model_version: int
    episodes: int
    episode_return_mean: float | None
    frames_per_s: float
    elapsed_s: float
    learner: Mapping[str, float]
    evaluation: Mapping[str, Any] | None
    snapshot: Mapping[str, Any] = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_snapshot(cls, run_id: str, snapshot: Mapping[str, Any]) -> Progress:
        """The payload of a progress snapshot."""
        mean = snapshot["episode_return_mean"]
        return cls(
            run_id=run_id,
            frames=int(snapshot["frames"]),
            total_frames=int(snapshot["total_frames"]),
            optim_steps=int(snapshot["optim_steps"]),
            model_version=int(snapshot["model_version"]),
            episodes=int(snapshot["episodes"]),
            episode_return_mean=None if math.isnan(mean) else float(mean),
            frames_per_s=float(snapshot["frames_per_s"]),
            elapsed_s=float(snapshot["elapsed_s"]),
            learner=dict(snapshot.get("learner", {})),
            evaluation=snapshot.get("evaluation"),
            snapshot=dict(snapshot),
        )


@dataclasses.dataclass(frozen=True)
class CheckpointSaved:
    """A checkpoint was cut.

    Attributes:
        run_id: The run's id.
        path: The checkpoint directory (``load_policy`` takes it).
        seconds: How long the cut took.
        frames: Frames collected at the cut.
    """

    run_id: str
    path: Path
    seconds: float
    frames: int


@dataclasses.dataclass(frozen=True)
class TrainEnded:
    """Training is done (the final checkpoint and evaluation follow).

    Attributes:
        run_id: The run's id.
        frames: Frames collected.
        optim_steps: Optimizer steps done.
        stop_reason: Why it stopped early (None: the frame budget).
    """

    run_id: str
    frames: int
    optim_steps: int
    stop_reason: str | None


def payload_hook(event: str, callback):
    """A controller hook ``hook(controller, *args)`` calling ``callback(payload)`` for ``event``.

    Raises:
        ValueError: Naming the events, for an unknown ``event``.
    """
    makers = {
        "setup": lambda c: RunStarted(
            c.run_id, c.counters.collected_frames, c.counters.published_version
        ),
        "rollout": lambda c, receipt: receipt,
        "round": lambda c, receipt: receipt,
        "progress": lambda c, snapshot: Progress.from_snapshot(c.run_id, snapshot),
        "checkpoint": lambda c, path, seconds: CheckpointSaved(
            c.run_id, Path(path), float(seconds), c.counters.collected_frames
        ),
        "train_end": lambda c: TrainEnded(
            c.run_id, c.counters.collected_frames, c.counters.optim_steps, c.stop_reason
        ),
    }
    if event not in makers:
        raise ValueError(f"event: must be one of {tuple(makers)}, got {event!r}")
    make = makers[event]
    return lambda controller, *args: callback(make(controller, *args))


EVENTS = ("setup", "rollout", "round", "progress", "checkpoint", "train_end")
