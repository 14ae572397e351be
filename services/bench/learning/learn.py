"""``python -m services.bench learn``: learning curves of the shipped configs against references.

Runs each entry of a suite (:mod:`services.bench.learning.learn_suite`: ``cpu`` or ``full``) with
the CLI (``python -m services.train``) in a subprocess, one run at a time, seeds ``0..N-1``; each
run stops when the running mean return over the entry's episode window reaches its threshold, or at
its frame budget. Every entry's config is loaded and its env built before the first run, so a config
that needs a missing extra (``box2d``, ``mujoco``, ``atari``, ``marl``) or a GPU this host lacks is
refused up front, naming it (exit code 2).

Per entry, in the last line of standard output (one JSON object, entries under ``entries``):
``frames_to_threshold`` (per seed, None where the budget ran out first),
``frames_to_threshold_median`` (over the seeds that reached it), ``solved`` ("3/3"),
``wall_s`` (per seed: process start to exit, start-up included), ``reference`` (the published
figure and its source) and ``vs_reference`` (median frames to threshold over the reference's
frames), ``invalid_actions`` (entries with an action mask: the actions taken that the mask
forbade, summed over the seeds; must be 0), and ``plot``: a PNG of the running mean return
against frames for each seed, with the threshold and the reference marked
(:mod:`services.bench.learning.learn_plot`), written under
``--out`` (default ``<storage root>/bench-learn-<time>``) next to the runs' directories and
``report.json`` (the entries so far). A run that fails or times out counts as not reached, its
error under ``errors``, and the bench goes on.

``--parallel K`` runs K seeds of an entry at once (each its own process and local Ray): on a
machine with cores to spare, where one run does not use them all; ``wall_s`` then includes the
sharing.

Examples:
    python -m services.bench learn --suite cpu --seeds 3
    python -m services.bench learn --entries pong-ppo-smoke --seeds 3 --parallel 3
    python -m services.bench learn --entries cartpole-ppo --seeds 1 --frames 4096
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from services.bench.learning.learn_plot import plot_entry
from services.bench.learning.learn_suite import ENTRIES, SUITES, Entry, suite

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "deploy" / "configs"


def run_overrides(
    entry: Entry, seed: int, storage: Path, frames: int, extra: tuple[str, ...] = ()
) -> list[str]:
    """The ``--set`` overrides of one run of ``entry``: its own, then ``extra``, then the bench's.

    Examples:
        >>> entry = ENTRIES["cartpole-ppo"]
        >>> run_overrides(entry, 1, Path("/tmp/x"), 5000)[:3]
        ['seed=1', 'controller.total_frames=5000', 'controller.stop_return=475.0']
    """
    return [
        *entry.overrides,
        *extra,
        f"seed={seed}",
        f"controller.total_frames={frames}",
        f"controller.stop_return={entry.threshold}",
        f"controller.return_milestones=[{entry.threshold}]",
        f"controller.episode_window={entry.episode_window}",
        "controller.log_interval_s=2",
        "metrics.enabled=false",
        "checkpoint.at_end=false",
        "checkpoint.interval_frames=0",
        "checkpoint.interval_s=0",
        f"run.storage={storage}",
    ]


def check_entries(entries: list[Entry], extra: tuple[str, ...] = ()) -> None:
    """Loads every entry's config (with ``extra`` overrides) and builds its env, before any run.

    Raises:
        ConfigError: Naming the entry and the field (or the missing extra, or the GPU).
    """
    from services.config import ConfigError, load_config
    from services.config.spec import check_local_gpus, env_spaces

    for entry in entries:
        try:
            config = load_config(CONFIGS / entry.config, [*entry.overrides, *extra])
            check_local_gpus(config)
            env_spaces(config)
        except ConfigError as err:
            raise ConfigError(f"{entry.name} ({entry.config}): {err}") from None


def masked(entry: Entry) -> bool:
    """Whether the entry's config acts under action masks (``collector.action_mask_key``)."""
    from services.config import load_config

    return bool(load_config(CONFIGS / entry.config, entry.overrides).collector.action_mask_key)


def read_curve(run_dir: Path) -> list[tuple[int, float]]:
    """``(frames, running mean return)`` of each progress record of a run that has one."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    curve = []
    for line in path.read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if record.get("episode_return_mean") is not None:
            curve.append((int(record["frames"]), float(record["episode_return_mean"])))
    return curve


def run_cli(command: list[str], timeout: float) -> tuple[str, str, int]:
    """Runs a CLI run to its end: ``(stdout, stderr, exit code)``.

    A timeout, Ctrl-C or SIGTERM of the bench stops the run cleanly (SIGTERM: its final
    checkpoint and shutdown, up to a minute) before the bench exits.
    """
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    RUNNING.add(process)
    main = threading.current_thread() is threading.main_thread()  # else the caller's handler
    previous = signal.signal(signal.SIGTERM, _raise_interrupt) if main else None
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException:  # TimeoutExpired, KeyboardInterrupt: stop the run, then go on raising
        stop_run(process)
        raise
    finally:
        RUNNING.discard(process)
        if main:
            signal.signal(signal.SIGTERM, previous)
    return stdout, stderr, process.returncode


def stop_run(process: subprocess.Popen) -> None:
    """Stops a CLI run cleanly (SIGTERM: final checkpoint and shutdown), killing it after 60 s."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


# CLI runs in progress (``--parallel`` runs several at once, each waited for by its own thread).
RUNNING: set[subprocess.Popen] = set()


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_once(
    entry: Entry,
    seed: int,
    storage: Path,
    frames: int,
    *,
    timeout: float,
    extra: tuple[str, ...] = (),
) -> dict:
    """One CLI run of ``entry`` until its threshold or ``frames``; returns the seed's figures.

    Raises:
        RuntimeError: If the run exits with an error.
    """
    command = [sys.executable, "-m", "services.train", "--config", str(CONFIGS / entry.config)]
    for override in run_overrides(entry, seed, storage, frames, extra):
        command += ["--set", override]
    started = time.perf_counter()
    stdout, stderr, code = run_cli(command, timeout)
    wall_s = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(f"{entry.name} seed {seed} exited {code}: {stderr[-800:]}")
    summary = json.loads(stdout.strip().splitlines()[-1])
    milestone = summary["return_milestones"].get(f"{entry.threshold:g}")
    return {
        "seed": seed,
        "frames_to_threshold": milestone["frames"] if milestone else None,
        "seconds_to_threshold": milestone["process_s"] if milestone else None,
        "frames": summary["frames"],
        "final_return": summary["episode_return_mean"],
        "wall_s": round(wall_s, 1),
        "startup_s": summary["startup_s"],
        "invalid_actions": summary.get("invalid_actions", 0),
        "run_dir": summary["run_dir"],
        "curve": read_curve(Path(summary["run_dir"])),
    }


def summarize(entry: Entry, runs: list[dict], frames: int) -> dict:
    """The entry's figures over its seeds (``curve`` left out: it is in the plot)."""
    reached = [r["frames_to_threshold"] for r in runs if r["frames_to_threshold"] is not None]
    median = int(statistics.median(reached)) if reached else None
    reference = entry.reference
    ratio = None
    if median is not None and reference.frames:
        ratio = round(median / reference.frames, 2)
    return {
        "config": f"deploy/configs/{entry.config}",
        "threshold": entry.threshold,
        "episode_window": entry.episode_window,
        "frame_budget": frames,
        "frames_to_threshold": [r["frames_to_threshold"] for r in runs],
        "frames_to_threshold_median": median,
        "solved": f"{len(reached)}/{len(runs)}",
        "wall_s": [r["wall_s"] for r in runs],
        "seconds_to_threshold": [r["seconds_to_threshold"] for r in runs],
        "final_return": [r["final_return"] for r in runs],
        "errors": [r["error"] for r in runs if "error" in r],
        # Actions the env's mask forbade, over every seed (collector.action_mask_key): must be 0.
        **(
            {"invalid_actions": sum(r.get("invalid_actions") or 0 for r in runs)}
            if masked(entry)
            else {}
        ),
        "reference": {
            "frames": reference.frames,
            "score": reference.score,
            "source": reference.source,
            "note": reference.note,
        },
        "vs_reference": ratio,
    }


def select(suite_name: str, names: str | None) -> list[Entry]:
    """The suite's entries, or the named ones (any suite) when ``names`` is given.

    Raises:
        ValueError: Naming an unknown entry.
    """
    if not names:
        return suite(suite_name)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in ENTRIES]
    if unknown:
        raise ValueError(f"--entries: unknown {unknown}; known: {sorted(ENTRIES)}")
    return [ENTRIES[n] for n in wanted]


def default_out() -> Path:
    """``<storage root>/bench-learn-<YYYYmmdd-HHMMSS>``."""
    from services.run.storage import storage_root

    return storage_root() / time.strftime("bench-learn-%Y%m%d-%H%M%S")


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m services.bench learn")
    parser.add_argument("--suite", choices=SUITES, default="cpu", help="entries to run")
    parser.add_argument("--entries", help="comma-separated entry names instead of a suite")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per entry")
    parser.add_argument("--frames", type=int, help="cap every entry's frame budget (smoke runs)")
    parser.add_argument("--out", type=Path, help="directory for plots and run directories")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run at most")
    parser.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="seeds of an entry run at once (each run is its own process and local Ray)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for every entry's runs, e.g. --set learner.lr=0.0005 (repeatable)",
    )
    args = parser.parse_args(argv)
    try:
        entries = select(args.suite, args.entries)
    except ValueError as err:
        parser.error(str(err))
    from services.config import ConfigError

    try:
        check_entries(entries, tuple(args.set))
    except ConfigError as err:
        print(f"relayrl: {err}", file=sys.stderr)
        return 2
    out = (args.out or default_out()).expanduser().absolute()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    try:
        report = run_entries(entries, args, out)
    except KeyboardInterrupt:
        print("relayrl: interrupted; the current run was stopped", file=sys.stderr)
        return 130
    head = {"suite": args.suite, "seeds": args.seeds, "overrides": args.set, "out": str(out)}
    print(json.dumps({**head, "entries": report}), flush=True)
    return 0


def run_entries(entries: list[Entry], args: argparse.Namespace, out: Path) -> dict:
    """Runs every entry over its seeds; returns the report keyed by entry name."""
    report = {}
    for entry in entries:
        frames = min(entry.frame_budget, args.frames or entry.frame_budget)

        def seed_run(seed: int, entry: Entry = entry, frames: int = frames) -> dict:
            try:
                run = run_once(
                    entry, seed, out / "runs", frames, timeout=args.timeout, extra=tuple(args.set)
                )
            except (RuntimeError, subprocess.TimeoutExpired) as err:  # the next runs go on
                run = failed_run(seed, err)
            shown = {k: v for k, v in run.items() if k not in ("curve", "run_dir")}
            print(f"{entry.name} seed {seed}: {json.dumps(shown)}", file=sys.stderr, flush=True)
            return run

        runs = run_seeds(seed_run, args.seeds, getattr(args, "parallel", 1))
        report[entry.name] = summarize(entry, runs, frames)
        report[entry.name]["plot"] = str(plot_entry(entry, runs, out))
        (out / "report.json").write_text(json.dumps(report, indent=1))  # so far, if stopped
    return report


def stop_all(grace_s: float = 60.0) -> None:
    """SIGTERM to every CLI run in progress, SIGKILL to those still running after ``grace_s``."""
    running = list(RUNNING)
    for process in running:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()


def run_seeds(seed_run, seeds: int, parallel: int) -> list[dict]:
    """``seed_run(seed)`` for seeds ``0..seeds-1``, ``parallel`` at a time; results in seed order.

    With ``parallel`` above 1 each run waits in a thread of its own; Ctrl-C or SIGTERM of the
    bench stops every run in progress cleanly before the bench exits.
    """
    if parallel <= 1:
        return [seed_run(seed) for seed in range(seeds)]
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    pool = ThreadPoolExecutor(parallel, thread_name_prefix="seed")
    futures = []
    try:
        futures = [pool.submit(seed_run, seed) for seed in range(seeds)]
        return [future.result() for future in futures]
    except BaseException:
        for future in futures:
            future.cancel()
        stop_all()  # each run's own thread reads its output until it exits
        raise
    finally:
        pool.shutdown(wait=True)
        signal.signal(signal.SIGTERM, previous)


def failed_run(seed: int, err: Exception) -> dict:
    """A seed's figures for a run that failed or timed out (counted as not reached)."""
    return {
        "seed": seed,
        "frames_to_threshold": None,
        "seconds_to_threshold": None,
        "frames": None,
        "final_return": None,
        "wall_s": None,
        "error": str(err)[-400:],
        "curve": [],
    }


if __name__ == "__main__":
    sys.exit(main())
