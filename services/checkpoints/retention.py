"""Checkpoint retention by metric: keep the N best checkpoints next to the newest ones.

``checkpoint.keep_best: N`` with ``checkpoint.best_metric`` (e.g.
``evaluation/episode_return_mean``) and ``checkpoint.best_mode`` (``max`` or ``min``) keeps, on
each rotation, the ``checkpoint.keep`` newest checkpoints and the N whose metric is best. A
checkpoint's metric is read from its own ``driver.json``: ``evaluation/...`` from the last
completed evaluation it carries, ``episode_return_mean`` from its episode window. A checkpoint
without the metric (no evaluation finished yet) never counts among the best.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from services.checkpoints.store import CheckpointStore
from services.evaluation.schedule import metric_value


def checkpoint_metrics(checkpoint: Path) -> dict:
    """The metrics a checkpoint's ``driver.json`` records (empty when unreadable)."""
    try:
        driver = json.loads((checkpoint / "driver.json").read_text())
    except (OSError, ValueError):
        return {}
    returns = driver.get("episode_returns") or []
    return {
        "episode_return_mean": sum(returns) / len(returns) if returns else None,
        "evaluation": driver.get("evaluation", {}).get("last") or {},
    }


def checkpoint_score(checkpoint: Path, metric: str) -> float | None:
    """The value of ``metric`` in a checkpoint (None when absent or not finite)."""
    value = metric_value(checkpoint_metrics(checkpoint), metric)
    return value if value is not None and math.isfinite(value) else None


class BestCheckpointStore(CheckpointStore):
    """A rotation that also keeps the ``keep_best`` best checkpoints by a metric.

    Args:
        root: The rotation directory.
        keep: Newest checkpoints kept.
        keep_best: Best checkpoints kept besides.
        metric: The metric (``evaluation/episode_return_mean``).
        mode: ``max`` or ``min``.
    """

    def __init__(
        self,
        root: str | Path,
        keep: int,
        keep_best: int,
        metric: str,
        mode: str = "max",
        *,
        owner: str | None = None,
        key: bytes | None = None,
    ) -> None:
        super().__init__(root, keep, owner=owner, key=key)
        self.keep_best = keep_best
        self.metric = metric
        self.mode = mode

    def best(self) -> list[Path]:
        """Its owners' ``keep_best`` best checkpoints, best first (ties: the newer first)."""
        scored = []
        for path in self.own():
            score = checkpoint_score(path, self.metric)
            if score is not None:
                scored.append((score if self.mode == "max" else -score, path.name, path))
        scored.sort(reverse=True)
        return [path for _, _, path in scored[: self.keep_best]]

    def rotate(self) -> None:
        """Deletes its owners' checkpoints that are neither among the newest nor the best."""
        own = self.own()
        kept = set(own[-self.keep :]) | set(self.best())
        for old in own:
            if old not in kept:
                shutil.rmtree(old, ignore_errors=True)
        self.remove_staging()


def make_store(root: str | Path, checkpoint_config, owner: str | None = None) -> CheckpointStore:
    """The rotation a ``CheckpointConfig`` asks for (by metric when ``keep_best > 0``).

    The root is made absolute, so every checkpoint path the run logs or reports is; ``owner``
    is the run id (rotation touches only its own checkpoints).
    """
    from services.checkpoints.trust import signing_key

    c = checkpoint_config
    root = Path(root).expanduser().absolute()
    key = signing_key(c.signing_key)  # None: RELAYRL_CHECKPOINT_KEY, if set
    if c.keep_best > 0:
        return BestCheckpointStore(
            root, c.keep, c.keep_best, c.best_metric, c.best_mode, owner=owner, key=key
        )
    return CheckpointStore(root, c.keep, owner=owner, key=key)
