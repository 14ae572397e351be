"""The tune directory's outputs: ``trials.csv``, ``best.json``, the return-vs-frames plot.

Built from Tune's results (one ``ray.tune.Result`` per trial: its last result and its history)
and the trials' own lineage lines (``lineage.jsonl``, written by ``services.search.trial`` at
each exploit). ``best.json`` names the best trial's resolved config (its run's ``config.yaml``),
run directory and newest valid checkpoint, ready for ``relayrl evaluate`` and ``relayrl
export``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import yaml

from services.checkpoints.store import latest_valid


def read_lineage(tune_dir: Path) -> list[dict]:
    """The exploits of ``lineage.jsonl``, in the order they happened."""
    path = tune_dir / "lineage.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _finite(value) -> float | None:
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def trial_rows(
    results, ids: list[str], metric: str, max_frames: int, keys: list[str]
) -> list[dict]:
    """One row per trial (``ids``: Tune's trial ids, in the results' order)."""
    rows = []
    for result, trial_id in zip(results, ids, strict=True):
        last = result.metrics or {}
        history = result.metrics_dataframe
        values = [] if history is None or metric not in history else list(history[metric])
        finite = [v for v in (_finite(x) for x in values) if v is not None]
        frames = int(last.get("frames") or 0)
        row = {"trial_id": trial_id, "status": "error" if result.error else "ok"}
        row.update({key: (result.config or {}).get(key) for key in keys})
        row.update(
            frames=frames,
            last=_finite(last.get(metric)),
            best=max(finite) if finite else None,
            stopped_early=bool(
                not result.error and not last.get("run_finished") and frames < max_frames
            ),
            run_id=last.get("run_id"),
            run_dir=last.get("run_dir"),
        )
        rows.append(row)
    return rows


def write_trials(tune_dir: Path, rows: list[dict], lineage: list[dict]) -> Path:
    """Writes ``trials.csv`` (with the exploits each trial received)."""
    received: dict[str, int] = {}
    for line in lineage:
        received[line["receiver"]] = received.get(line["receiver"], 0) + 1
    path = tune_dir / "trials.csv"
    fields = [*rows[0].keys(), "exploits_received"] if rows else ["trial_id"]
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "exploits_received": received.get(row["trial_id"], 0)})
    return path


def write_best(tune_dir: Path, rows: list[dict], metric: str) -> dict | None:
    """Writes ``best.json`` for the trial with the highest last metric; returns it."""
    ranked = [r for r in rows if r["last"] is not None and r["run_dir"]]
    if not ranked:
        return None
    best = max(ranked, key=lambda r: r["last"])
    run_dir = Path(best["run_dir"])
    try:
        checkpoint = str(latest_valid(run_dir / "checkpoints")[0])
    except Exception:
        checkpoint = None
    config_file = run_dir / "config.yaml"
    record = {
        "trial_id": best["trial_id"],
        "metric": metric,
        "value": best["last"],
        "best_value": best["best"],
        "run_id": best["run_id"],
        "run_dir": str(run_dir),
        "checkpoint": checkpoint,
        "config": yaml.safe_load(config_file.read_text()) if config_file.exists() else None,
    }
    (tune_dir / "best.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def plot_trials(tune_dir: Path, results, ids: list[str], metric: str, lineage: list[dict]) -> Path:
    """Draws every trial's metric against frames, PBT's exploits marked (x at the receiver)."""
    fig, ax = plt.subplots(figsize=(8, 5), constrained_layout=True)
    curves: dict[str, tuple[list, list]] = {}
    for result, trial_id in zip(results, ids, strict=True):
        history = result.metrics_dataframe
        if history is None or metric not in history or "frames" not in history:
            continue
        curves[trial_id] = (list(history["frames"]), list(history[metric]))
        ax.plot(*curves[trial_id], label=trial_id, linewidth=1.0)
    for line in lineage:
        ax.axvline(line["frame"], color="grey", alpha=0.2, linewidth=0.8)
        ax.plot([line["frame"]], [_level(curves.get(line["receiver"]), line["frame"])], "kx")
    ax.set(xlabel="frames", ylabel=metric, title="Trials: metric vs frames (x: PBT exploit)")
    if curves:
        ax.legend(fontsize="small")
    out = tune_dir / "return_vs_frames.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _level(curve, frame: int) -> float:
    """The curve's value at the first point at or after ``frame`` (NaN when none)."""
    if curve is None:
        return float("nan")
    for x, y in zip(*curve, strict=True):
        if x >= frame:
            return y
    return float("nan")
