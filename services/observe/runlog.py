"""A run's ``metrics.jsonl`` read back: its records, one key's series, its evaluations.

The readers behind ``python -m services.plot`` and the sweep's tables
(:mod:`services.observe.sweep_report`).

Examples:
    >>> records = [{"frames": 1, "learner": {"loss_q": 0.5}}, {"frames": 2, "learner": {}}]
    >>> series(records, "learner.loss_q")
    [0.5, nan]
"""

from __future__ import annotations

import json
from pathlib import Path


def read_records(run_dir: Path) -> list[dict]:
    """Every ``metrics.jsonl`` record: progress snapshots and events (``"event"`` key)."""
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_log(run_dir: Path) -> list[dict]:
    """Reads the progress snapshots of ``metrics.jsonl`` (event records left out).

    Raises:
        FileNotFoundError: If the run directory has no metrics log.
        ValueError: If the log holds no record.
    """
    records = [r for r in read_records(run_dir) if "event" not in r]
    if not records:
        raise ValueError(f"{run_dir / 'metrics.jsonl'}: no records yet")
    return records


def read_events(run_dir: Path, event: str) -> list[dict]:
    """The event records of one kind (e.g. ``"resize"``: live resizes, with their frames)."""
    return [r for r in read_records(run_dir) if r.get("event") == event]


def series(records: list[dict], key: str) -> list[float]:
    """Values of one key (None for missing), nested keys as ``learner.loss_q``."""
    out = []
    for record in records:
        value = record
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out.append(float("nan") if value is None else value)
    return out


def evaluation_points(records: list[dict]) -> list[tuple[int, float]]:
    """``(frames, mean return)`` of each distinct evaluation logged (``evaluation`` blocks)."""
    points = {}
    for record in records:
        evaluation = record.get("evaluation")
        if evaluation and evaluation.get("episode_return_mean") is not None:
            points[evaluation["frames"]] = evaluation["episode_return_mean"]
    return sorted(points.items())
