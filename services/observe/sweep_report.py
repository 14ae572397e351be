"""The sweep's outputs: a summary table (per run and per grid point) and a plot across seeds.

Per-run rows copy the figures of each run's own summary (``<run dir>/summary.json``) verbatim;
per-point rows give the mean and the standard deviation (population, ``ddof=0``) over seeds.
The plot draws, for each grid point, the running mean return of every seed against collected
frames (thin lines) with the mean across seeds and a band of one standard deviation, on a
common frame grid up to the shortest run's last logged frame.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from services.observe.runlog import read_log, series

# Summary fields shown per run, in order.
FIELDS = (
    "frames",
    "optim_steps",
    "episodes",
    "episode_return_mean",
    "wall_s",
    "frames_per_s",
    "updates_per_s",
    "stop_reason",
)
# Fields averaged across seeds.
NUMERIC = ("frames", "optim_steps", "episode_return_mean", "wall_s", "frames_per_s")


def point_label(point: dict) -> str:
    """``learner.lr=0.001 replay.num_shards=2`` (``default`` for an empty grid point)."""
    return " ".join(f"{k}={v}" for k, v in point.items()) or "default"


def milestone_fields(results: list[dict]) -> list[str]:
    """``frames_to_<return>`` for every return milestone any run reached, in return order."""
    reached = {
        key for r in results for key in ((r.get("summary") or {}).get("return_milestones") or {})
    }
    return [f"frames_to_{key}" for key in sorted(reached, key=float)]


def run_rows(results: list[dict]) -> list[dict]:
    """One row per run: id, seed, grid point, status, its summary's figures.

    The figures are :data:`FIELDS` and ``frames_to_<return>``: the frames at which the run's
    running mean return first reached each milestone (None: never).
    """
    milestones = milestone_fields(results)
    rows = []
    for result in results:
        summary = result.get("summary") or {}
        row = {"run_id": result["run_id"], "seed": result["seed"], "point": result["point"]}
        row["status"] = result["status"]
        row.update({field: summary.get(field) for field in FIELDS})
        reached = summary.get("return_milestones") or {}
        for field in milestones:
            row[field] = (reached.get(field.removeprefix("frames_to_")) or {}).get("frames")
        rows.append(row)
    return rows


def point_rows(rows: list[dict]) -> list[dict]:
    """Mean and standard deviation over the finished runs of each grid point.

    Of :data:`NUMERIC`, and of ``frames_to_*`` over the runs that reached the milestone.
    """
    points: dict[str, list[dict]] = {}
    for row in rows:
        points.setdefault(row["point"], []).append(row)
    out = []
    for point, members in points.items():
        done = [r for r in members if r["status"] == "succeeded"]
        agg = {"point": point, "runs": len(members), "succeeded": len(done)}
        milestones = [k for k in members[0] if k.startswith("frames_to_")]
        for field in (*NUMERIC, *milestones):
            values = [r[field] for r in done if isinstance(r[field], int | float)]
            finite = [v for v in values if math.isfinite(v)]
            agg[f"{field}_mean"] = round(float(np.mean(finite)), 3) if finite else None
            agg[f"{field}_std"] = round(float(np.std(finite)), 3) if finite else None
        out.append(agg)
    return out


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def markdown(rows: list[dict]) -> str:
    """A Markdown table of dict rows (columns from the first row)."""
    if not rows:
        return ""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_tables(sweep_dir: Path, rows: list[dict], points: list[dict]) -> dict[str, Path]:
    """Writes ``runs.csv``, ``points.csv`` and ``summary.md``; returns their paths.

    Returns:
        ``{"runs_csv": ..., "points_csv": ..., "markdown": ...}``.
    """
    paths = {}
    for name, table in (("runs", rows), ("points", points)):
        path = sweep_dir / f"{name}.csv"
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(table[0]) if table else [])
            writer.writeheader()
            writer.writerows(table)
        paths[f"{name}_csv"] = path
    text = "# Sweep summary\n\n## Runs\n\n" + markdown(rows) + "\n\n## Across seeds\n\n"
    text += markdown(points) + "\n"
    paths["markdown"] = sweep_dir / "summary.md"
    paths["markdown"].write_text(text)
    return paths


def return_curves(results: list[dict]) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Per grid point: each finished run's (frames, running mean return) from its log."""
    curves: dict[str, list] = {}
    for result in results:
        if result["status"] != "succeeded":
            continue
        records = read_log(Path(result["run_dir"]))
        frames = np.asarray(series(records, "frames"), dtype=float)
        returns = np.asarray(series(records, "episode_return_mean"), dtype=float)
        keep = np.isfinite(frames) & np.isfinite(returns)
        curves.setdefault(result["point"], []).append((frames[keep], returns[keep]))
    return curves


def plot_sweep(sweep_dir: Path, results: list[dict], *, grid_points: int = 100) -> Path:
    """Draws return vs frames per grid point: seeds, their mean and a ±1 std band."""
    fig, ax = plt.subplots(figsize=(8, 5), constrained_layout=True)
    for point, runs in return_curves(results).items():
        runs = [(f, r) for f, r in runs if len(f)]
        if not runs:
            continue
        end = min(f[-1] for f, _ in runs)
        start = max(f[0] for f, _ in runs)
        grid = np.linspace(start, end, grid_points) if end > start else np.array([end])
        stacked = np.stack([np.interp(grid, f, r) for f, r in runs])
        mean, std = stacked.mean(axis=0), stacked.std(axis=0)
        (line,) = ax.plot(grid, mean, label=f"{point} (mean of {len(runs)})")
        ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.2)
        for frames, returns in runs:
            ax.plot(frames, returns, color=line.get_color(), alpha=0.35, linewidth=0.8)
    ax.set(
        xlabel="frames",
        ylabel="episode return (running mean)",
        title="Return vs frames across seeds (band: ±1 std)",
    )
    ax.legend(fontsize="small")
    out = sweep_dir / "return_vs_frames.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def write_results(sweep_dir: Path, record: dict) -> Path:
    """Writes ``sweep.json`` (command, runs, tables, wall time)."""
    path = sweep_dir / "sweep.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path
