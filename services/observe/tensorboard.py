"""Optional TensorBoard logging of progress snapshots (``metrics.tensorboard: true``).

Needs the ``tensorboard`` package (``pip install "relayrl[tensorboard]"``). Scalars are logged
against collected frames: ``episode/return``, ``episode/length``, ``throughput/frames_per_s``,
``throughput/updates_per_s``, ``learner/update_to_data``, every numeric exploration parameter as
``exploration/<name>`` (e.g. ``exploration/epsilon``) and every learner metric as
``learner/<name>``, plus ``replay/size/<shard>`` and, with evaluation, ``evaluation/...``.
"""

from __future__ import annotations

import math
from pathlib import Path

try:
    from torch.utils.tensorboard import SummaryWriter

    _has_tensorboard = True
except ImportError:  # pragma: no cover - depends on the environment
    _has_tensorboard = False

SCALARS = {
    "episode_return_mean": "episode/return",
    "episode_length_mean": "episode/length",
    "frames_per_s": "throughput/frames_per_s",
    "updates_per_s": "throughput/updates_per_s",
    "update_to_data": "learner/update_to_data",
}


class TensorBoardLogger:
    """Controller ``progress`` hook writing TensorBoard scalars under ``log_dir``.

    Raises:
        ImportError: If the tensorboard package is missing, saying how to install it.
    """

    def __init__(self, log_dir: str | Path) -> None:
        if not _has_tensorboard:
            raise ImportError(
                "metrics.tensorboard=true needs the tensorboard package: "
                'pip install "relayrl[tensorboard]"'
            )
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def __call__(self, controller, snapshot: dict) -> None:
        """Writes one snapshot's scalars at step = collected frames."""
        step = snapshot["frames"]
        for key, tag in SCALARS.items():
            value = snapshot.get(key)
            if value is not None and math.isfinite(value):
                self.writer.add_scalar(tag, value, step)
        for name, value in snapshot.get("exploration", {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self.writer.add_scalar(f"exploration/{name}", value, step)
        for name, value in snapshot.get("learner", {}).items():
            if math.isfinite(value):
                self.writer.add_scalar(f"learner/{name}", value, step)
        evaluation = snapshot.get("evaluation")
        if evaluation:  # at the frames the evaluation started, with the version it used
            for name in ("episode_return_mean", "episode_length_mean", "version"):
                self.writer.add_scalar(f"evaluation/{name}", evaluation[name], evaluation["frames"])
        for shard in snapshot.get("replay", []):
            self.writer.add_scalar(f"replay/size/{shard['shard_id']}", shard["size"], step)

    def close(self) -> None:
        """Flushes and closes the event file."""
        self.writer.close()
