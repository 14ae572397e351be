"""``python -m services.plot RUN_DIR``: PNG learning curves from a run's ``metrics.jsonl``.

Writes ``RUN_DIR/plots/learning_curves.png`` with four panels: episode return vs frames, return
vs wall time, learner losses vs frames, and throughput (frames/s, updates/s) vs frames. Live
resizes (``resize`` records, ``services.driver.elastic``) are dotted lines at their frames.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from services.observe.runlog import evaluation_points, read_events, read_log, series

__all__ = ["evaluation_points", "main", "plot_run", "read_events", "read_log", "series"]


def plot_run(run_dir: str | Path) -> Path:
    """Draws the learning curves of a run and returns the PNG's path."""
    run_dir = Path(run_dir)
    records = read_log(run_dir)
    frames = series(records, "frames")
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    ax = axes[0][0]
    ax.plot(frames, series(records, "episode_return_mean"))
    evaluations = evaluation_points(records)
    if evaluations:
        ax.plot(*zip(*evaluations, strict=True), "o-", label="greedy evaluation")
        ax.legend(fontsize="small", labels=["training (exploring)", "greedy evaluation"])
    ax.set(xlabel="frames", ylabel="episode return (window mean)", title="Return vs frames")
    ax = axes[0][1]
    ax.plot(series(records, "elapsed_s"), series(records, "episode_return_mean"))
    ax.set(xlabel="wall time (s)", ylabel="episode return", title="Return vs wall time")
    ax = axes[1][0]
    terms = sorted({k for r in records for k in r.get("learner", {})})
    for term in terms:
        ax.plot(frames, series(records, f"learner.{term}"), label=term)
    ax.set(xlabel="frames", title="Learner metrics (last round)")
    if terms:
        ax.set_yscale("symlog")
        ax.legend(fontsize="small")
    ax = axes[1][1]
    ax.plot(frames, series(records, "frames_per_s"), label="frames/s")
    ax.plot(frames, series(records, "updates_per_s"), label="updates/s")
    ax.set(xlabel="frames", title="Throughput")
    ax.legend(fontsize="small")
    for event in read_events(run_dir, "resize"):  # live resizes: a dotted line at their frames
        text = f"{event['what']} {event['from']}->{event['to']}"
        for ax in (axes[0][0], axes[1][0], axes[1][1]):
            ax.axvline(event["frames"], color="grey", linestyle=":", linewidth=1)
        axes[0][0].annotate(text, (event["frames"], 0), xycoords=("data", "axes fraction"))
    out = run_dir / "plots" / "learning_curves.png"
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None, prog: str = "python -m services.plot") -> int:
    """CLI entry point; returns the exit code (``prog``: how the user called it)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__,
        epilog=f"examples:\n  {prog} ~/relayrl_results/<run id>",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", help="a run directory holding metrics.jsonl")
    args = parser.parse_args(argv)
    try:
        out = plot_run(args.run_dir)
    except (OSError, ValueError) as err:
        print(f"relayrl: cannot plot: {err}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
