"""The learn bench's plot of one entry: running mean return against frames, reference marked.

One curve per seed (from each run's ``metrics.jsonl``), the threshold as a horizontal line, and
the reference as a vertical line at its frames (labelled with its source's repository or paper)
or, for a reference that is a return only (random play), as a horizontal line at that return.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from services.bench.learning.learn_suite import Entry


def plot_entry(entry: Entry, runs: list[dict], out: Path) -> Path:
    """Writes ``<out>/<entry name>.png`` and returns its path.

    Args:
        entry: The suite entry.
        runs: Per seed, ``seed``, ``curve`` (``(frames, running mean)`` pairs) and
            ``frames_to_threshold`` (None: not reached).
        out: The output directory.
    """
    fig, ax = plt.subplots(figsize=(7, 4.2), constrained_layout=True)
    for run in runs:
        curve = run["curve"]
        reached = run["frames_to_threshold"]
        label = f"seed {run['seed']}" + (f" ({reached:,} frames)" if reached else " (not reached)")
        if curve:
            ax.plot([f for f, _ in curve], [r for _, r in curve], label=label)
    threshold = f"threshold {entry.threshold:g}"
    ax.axhline(entry.threshold, color="black", linestyle=":", label=threshold)
    reference = entry.reference
    source = reference.source.split(" ")[0]
    if reference.frames:
        ax.axvline(
            reference.frames,
            color="tab:red",
            linestyle="--",
            label=f"reference: {reference.score:g} in {reference.frames:,} frames ({source})",
        )
        ax.axvline(reference.frames * 1.5, color="tab:red", linestyle=":", alpha=0.5, label="1.5 x")
    else:
        label = f"reference: {reference.score:g} ({source})"
        ax.axhline(reference.score, color="tab:red", linestyle="--", label=label)
    solved = sum(r["frames_to_threshold"] is not None for r in runs)
    ax.set(
        xlabel="frames",
        ylabel=f"return (mean of {entry.episode_window} episodes)",
        title=f"{entry.name} ({entry.config}): {solved}/{len(runs)} reached",
    )
    ax.legend(fontsize="small", loc="best")
    path = out / f"{entry.name}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
