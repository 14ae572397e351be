"""Early stopping on a logged metric (pure, no Ray).

The controller feeds :class:`EarlyStopping` the metric named by ``controller.early_stop_metric``
from each progress snapshot (e.g. ``episode_return_mean``) and from each learner round
(``learner.loss_q``, ``learner.grad_norm``, ...). The run stops when the metric has not improved
by more than ``min_delta`` for ``patience_frames`` collected frames, or at once when it turns
NaN or infinite (episode statistics before the first finished episode are simply not there yet).
"""

from __future__ import annotations

import math

MODES = ("max", "min")


class EarlyStopping:
    """Tracks the best value of one metric over collected frames.

    Args:
        metric: Snapshot key, dotted for nested learner metrics (``learner.loss_q``); ``/``
            works as ``.`` (``evaluation/episode_return_mean``).
        mode: ``max`` (higher is better) or ``min``.
        patience_frames: Frames without improvement before stopping.
        min_delta: Smallest change that counts as an improvement.

    Examples:
        >>> stopper = EarlyStopping("episode_return_mean", "max", patience_frames=100)
        >>> stopper.update(0, 10.0), stopper.update(50, 10.0), stopper.update(100, 10.0)
        (None, None, 'episode_return_mean did not improve on 10 for 100 frames')
    """

    def __init__(
        self, metric: str, mode: str = "max", patience_frames: int = 0, min_delta: float = 0.0
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.metric = metric
        self.mode = mode
        self.patience_frames = patience_frames
        self.min_delta = min_delta
        self.best: float | None = None
        self.best_frames = 0

    @classmethod
    def from_config(cls, controller_config) -> EarlyStopping | None:
        """The stopper of a ``ControllerConfig``; None when ``early_stop_metric`` is unset."""
        c = controller_config
        if not c.early_stop_metric:
            return None
        return cls(
            c.early_stop_metric,
            c.early_stop_mode,
            c.early_stop_patience_frames,
            c.early_stop_min_delta,
        )

    def value_in(self, snapshot: dict) -> float | None:
        """The metric's value in a snapshot (None when absent)."""
        node = snapshot
        for part in self.metric.replace("/", ".").split("."):  # evaluation/episode_return_mean
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return None if node is None else float(node)

    def _improved(self, value: float) -> bool:
        if self.best is None:
            return True
        if self.mode == "max":
            return value > self.best + self.min_delta
        return value < self.best - self.min_delta

    def update(self, frames: int, value: float | None) -> str | None:
        """Records a value at ``frames``; returns why to stop, or None to go on."""
        if value is None or (math.isnan(value) and self.metric.startswith("episode_")):
            return None
        if not math.isfinite(value):
            return f"{self.metric} is {value}"
        if self._improved(value):
            self.best, self.best_frames = value, frames
            return None
        if frames - self.best_frames >= self.patience_frames:
            return (
                f"{self.metric} did not improve on {self.best:g} for "
                f"{frames - self.best_frames} frames"
            )
        return None
