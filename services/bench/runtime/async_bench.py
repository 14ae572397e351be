"""``python -m services.bench async``: the lockstep and the asynchronous on-policy loops compared.

The two arms are the algorithm of each loop (``onpolicy``, ``async``) that ships a config for
every task of this bench (``deploy/configs/<task>_<name>.yaml``; today PPO and APPO). Per task
(CartPole: 2 collectors x 8 envs; the Pong smoke: 2 collectors x 4 envs) both run the same
frame budget with the lockstep arm's collectors, envs per collector and hidden sizes, taking
turns (lockstep, asynchronous, lockstep, ...) ``--repeats`` times on one local Ray, with no
early stop, no checkpoints and no metrics server. Per arm, the mean over repeats and each
repeat's value of:

* ``frames_per_s``: collected env frames over the training wall time (the summary's);
  ``frames_trained_per_s``: the env frames the learner trained on over the same time;
* ``collector_wait_fraction``: ``1 - sum(work_s) / (collectors x wall_s)``, from every
  rollout receipt (``rollout`` hook), measured the same way for both arms: the share of the
  collectors' wall time they had no rollout to work on (waiting for the driver's call, that
  is for the learner or for permission to collect, or for weights); a rollout's work is
  applying newer weights, stepping and sending its write; ``collector_stepping_fraction``:
  ``sum(rollout_s) / (collectors x wall_s)``, the share spent stepping envs and policy alone
  (the stricter view: what is neither is the collectors' own overhead);
* ``policy_lag_p50``, ``policy_lag_p99``: of the trained chunks (the lockstep loop: 0 by
  construction);
* ``dropped_fraction``: frames dropped as too stale over frames collected (lockstep: 0);
* ``learner_busy_fraction``: rank 0's round seconds over the wall time (near 1: the learner is
  the bottleneck).

Per task, ``<async>_over_<lockstep>_frames_per_s``. With ``--sample-factory PYTHON``, Sample
Factory 2.1's APPO runs CartPole with the asynchronous arm's settings (workers, envs, rollout,
batch, MLP) for the same budget in a subprocess of that interpreter, after Ray has shut down
(:func:`sample_factory_command`, :func:`sample_factory_figures`); the cartpole task gains
``sample_factory`` (SF counts the frames its learner trained on) and
``<async>_over_sample_factory_frames_per_s`` and ``..._frames_trained_per_s``. A table goes to
stderr; the last line of stdout is one JSON object.

Examples:
    python -m services.bench async --tasks cartpole --repeats 1 --cartpole-frames 20000
    python -m services.bench async --repeats 2 --sample-factory /work/sfvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from statistics import mean

import ray

from learner.algorithms import ALGORITHMS
from replay.local_ray import init_local_ray
from services.config import RunConfig, load_config
from services.driver.controller import Controller

CONFIGS = Path(__file__).resolve().parents[3] / "deploy" / "configs"
TASKS = ("cartpole", "pong")
LOOPS = ("onpolicy", "async")  # lockstep first: the ratio is asynchronous over lockstep
COMMON = [
    "controller.stop_return=null",
    "metrics.enabled=false",
    "checkpoint.interval_frames=0",
    "checkpoint.interval_s=0",
    "checkpoint.at_end=false",
    "controller.log_interval_s=5",
]


def compared_arms() -> tuple[str, str]:
    """(lockstep, asynchronous): each loop's one algorithm with a config for every task.

    Raises:
        RuntimeError: If a loop has none, or more than one, such algorithm.
    """
    arms = []
    for loop in LOOPS:
        names = [
            name
            for name, algo in ALGORITHMS.items()
            if algo.loop == loop and all(f"{t}_{name}.yaml" in algo.configs for t in TASKS)
        ]
        if len(names) != 1:
            raise RuntimeError(f"loop {loop}: {names} ship configs for {TASKS}; pass --arms")
        arms.extend(names)
    return arms[0], arms[1]


def arm_configs(task: str, arms: tuple[str, str], frames: int, storage: Path) -> list[RunConfig]:
    """Both arms' configs for ``task``: the asynchronous arm takes the lockstep one's sizes.

    The lockstep arm takes the asynchronous one's ``collector.nice``, so both run the same
    collectors (lockstep, collectors and learner never compute at once, so it changes little).
    """
    common = [*COMMON, f"controller.total_frames={frames}", f"checkpoint.dir={storage}"]
    lockstep = load_config(CONFIGS / f"{task}_{arms[0]}.yaml", common)
    sizes = [
        f"collector.num_collectors={lockstep.collector.num_collectors}",
        f"collector.envs_per_collector={lockstep.collector.envs_per_collector}",
        f"learner.hidden_sizes={list(lockstep.learner.hidden_sizes)}",
    ]
    other = load_config(CONFIGS / f"{task}_{arms[1]}.yaml", [*common, *sizes])
    nice = f"collector.nice={other.collector.nice}"
    lockstep = load_config(CONFIGS / f"{task}_{arms[0]}.yaml", [*common, nice])
    for field in ("env_id", "env_kwargs", "frame_skip"):
        if getattr(lockstep.collector, field) != getattr(other.collector, field):
            raise RuntimeError(f"{task}: collector.{field} differs between {arms}")
    return [lockstep, other]


def figures(
    summary: dict,
    busy_s: float,
    collectors: int,
    *,
    lockstep: bool,
    learner_s: float = 0.0,
    stepping_s: float | None = None,
) -> dict:
    """One run's figures from its summary, its rollouts' work and its rounds' seconds.

    ``busy_s`` is the rollouts' work (``work_s``), ``stepping_s`` their stepping alone
    (``rollout_s``; None: ``busy_s``).

    The loop counts trained and dropped steps in transitions; with a frame skip (Pong: 4) a
    transition is several env frames, so they are scaled by the run's frames per transition.

    Examples:
        >>> summary = {"frames": 1000, "transitions": 250, "wall_s": 2.0, "frames_per_s": 500.0}
        >>> summary.update(frames_trained=200, frames_dropped=50, policy_lag_p50=3.0)
        >>> summary.update(policy_lag_p99=9.0)
        >>> run = figures(summary, 3.0, 2, lockstep=False)
        >>> run["collector_wait_fraction"], run["frames_trained_per_s"], run["dropped_fraction"]
        (0.25, 400.0, 0.2)
    """
    wall = max(summary["wall_s"], 1e-9)
    stepping = busy_s if stepping_s is None else stepping_s
    transitions = max(summary["transitions"], 1)
    trained = transitions if lockstep else summary["frames_trained"]
    return {
        "frames": summary["frames"],
        "wall_s": summary["wall_s"],
        "frames_per_s": summary["frames_per_s"],
        "frames_trained_per_s": round(trained * summary["frames"] / transitions / wall, 1),
        "collector_wait_fraction": round(min(1.0, max(0.0, 1 - busy_s / (collectors * wall))), 4),
        "collector_stepping_fraction": round(min(1.0, stepping / (collectors * wall)), 4),
        "policy_lag_p50": 0.0 if lockstep else summary["policy_lag_p50"],
        "policy_lag_p99": 0.0 if lockstep else summary["policy_lag_p99"],
        "dropped_fraction": 0.0 if lockstep else round(summary["frames_dropped"] / transitions, 4),
        "loop_collector_wait_fraction": summary.get("collector_wait_fraction"),
        "learner_busy_fraction": round(min(1.0, learner_s / wall), 4),
    }


def run_once(config: RunConfig, *, lockstep: bool) -> dict:
    """One run on the connected Ray; its figures."""
    controller = Controller(config)
    busy = [0.0, 0.0, 0.0]  # collectors' work and stepping seconds, the learner's round seconds

    def on_rollout(_, receipt) -> None:
        busy[0] += receipt.work_s
        busy[2] += receipt.rollout_s

    def on_round(_, receipt) -> None:
        busy[1] += receipt.sample_s + receipt.train_s + receipt.publish_s

    controller.register("rollout", on_rollout)
    controller.register("round", on_round)
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    collectors = config.collector.num_collectors
    return figures(
        summary, busy[0], collectors, lockstep=lockstep, learner_s=busy[1], stepping_s=busy[2]
    )


def averaged(runs: list[dict]) -> dict:
    """The mean of each figure over ``runs`` and every repeat's value.

    Examples:
        >>> averaged([{"frames_per_s": 1.0}, {"frames_per_s": 2.0}])
        {'frames_per_s': 1.5, 'frames_per_s_all': [1.0, 2.0]}
    """
    out = {}
    for key in runs[0]:
        values = [run[key] for run in runs]
        if all(isinstance(v, int | float) for v in values):
            out[key] = round(mean(values), 4)
            out[f"{key}_all"] = values
    return out


# -- Sample Factory, the peer -----------------------------------------------------------------
LOG_TIME = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[\d+\] "
REPORT = re.compile(
    LOG_TIME + r"Fps is .*?Total num frames: (\d+)\..*?"
    r"Policy #0 lag: \(min: ([-\d.]+), avg: ([-\d.]+), max: ([-\d.]+)\)"
)
STOPPING = re.compile(LOG_TIME + r"Stopping ")  # its budget reached: components stop
FINAL = re.compile(LOG_TIME + r"Collected \{0: (\d+)\}, FPS: ([\d.]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def sample_factory_command(
    python: str, config: RunConfig, frames: int, train_dir: Path
) -> list[str]:
    """Sample Factory's APPO on the asynchronous arm's CartPole settings (CPU, no RNN, MLP).

    Workers, envs per worker, rollout (steps per chunk), the round's steps in its epochs of
    minibatches, the lag limit (SF's versions count optimizer steps, as relayrl's do), the
    learning rate and the hidden sizes come from ``config``;
    rewards are scaled by 0.1 as SF's own CartPole example does (unscaled, its learner logs a
    warning at every step).
    """
    collector, learner, passes = config.collector, config.learner, config.learner.vtrace
    steps = collector.rollout_frames // collector.envs_per_collector
    minibatch = learner.global_batch_size * steps // passes.num_minibatches
    return [
        python,
        "-m",
        "sf_examples.train_gym_env",
        f"--env={collector.env_id}",  # and SF's default (and only) algorithm, its APPO
        "--experiment=relayrl-bench",
        f"--train_dir={train_dir}",
        "--device=cpu",
        f"--num_workers={collector.num_collectors}",
        f"--num_envs_per_worker={collector.envs_per_collector}",
        f"--rollout={steps}",
        f"--batch_size={minibatch}",  # SF's SGD minibatch: a round is this x batches per epoch
        f"--num_batches_per_epoch={passes.num_minibatches}",
        f"--num_epochs={passes.num_epochs}",
        f"--max_policy_lag={learner.max_policy_lag}",
        f"--learning_rate={learner.lr}",
        "--encoder_mlp_layers",
        *[str(size) for size in learner.hidden_sizes],
        "--use_rnn=False",
        # SF 2.1.1's learner crashes on its V-trace path (summaries read GAE advantages,
        # alex-petrenko/sample-factory#332); its default GAE path costs the same per step.
        "--with_vtrace=False",
        "--normalize_input=False",
        "--normalize_returns=False",
        "--reward_scale=0.1",
        f"--train_for_env_steps={frames}",
        "--save_every_sec=1000000",
        "--save_best_every_sec=1000000",
        "--with_wandb=False",
        f"--seed={config.seed}",
    ]


def _seconds(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def sample_factory_figures(log: str) -> dict:
    r"""Throughput and lag from Sample Factory's log (its 5 s reports, its stop, its last line).

    ``frames_per_s``: the frames from its first report with frames > 0 to its final count,
    over the time from that report to its first ``Stopping`` line (its budget reached): its
    process, worker and model start-up and its process joins excluded, as a relayrl run's
    ``wall_s`` excludes its actors' start-up and shut-down. ``reported_fps``: its own final
    figure (frames over its whole main loop, start-up and joins included).

    Raises:
        RuntimeError: If the log lacks a report with frames (a run under about 5 s), its stop
            or its final count.

    Examples:
        >>> log = [
        ...     "[2026-12-05 13:13:43,000][7] Fps is (10 sec: nan). Total num frames: 22016. "
        ...     "Samples: 9. Policy #0 lag: (min: 0.0, avg: 0.3, max: 2.0)",
        ...     "[2026-12-05 13:13:47,000][9] Stopping Batcher_0...",
        ...     "[2026-12-05 13:13:51,000][7] Collected {0: 60928}, FPS: 3678.4",
        ... ]
        >>> peer = sample_factory_figures("\n".join(log))
        >>> peer["frames_per_s"], peer["reported_fps"], peer["policy_lag_max"]
        (9728.0, 3678.4, 2.0)
    """
    log = ANSI.sub("", log)
    reports = [m for m in REPORT.finditer(log) if int(m[2]) > 0]
    stopping, final = STOPPING.search(log), FINAL.search(log)
    if not reports or stopping is None or final is None:
        raise RuntimeError(f"Sample Factory's log has no throughput (too short?): {log[-1500:]}")
    first, last = reports[0], reports[-1]
    frames = int(final[2])
    seconds = max(_seconds(stopping[1]) - _seconds(first[1]), 1e-9)
    return {
        "frames": frames,
        "frames_per_s": round((frames - int(first[2])) / seconds, 1),
        "reported_fps": float(final[3]),
        "policy_lag_avg": float(last[4]),
        "policy_lag_max": float(last[5]),
    }


def run_sample_factory(command: list[str], timeout: float) -> dict:
    """Runs Sample Factory in its own process group (killed whole on a timeout)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its workers too: a crashed learner hangs them
        log, _ = proc.communicate()
        raise RuntimeError(f"Sample Factory ran past {timeout} s: ...{log[-1500:]}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"Sample Factory exited {proc.returncode}: ...{log[-1500:]}")
    return {
        **sample_factory_figures(log),
        "process_wall_s": round(time.perf_counter() - started, 2),
    }


# -- the command ----------------------------------------------------------------------------------
# The table's columns: (figure, heading, width, format).
COLUMNS = (
    ("frames_per_s", "frames/s", 9, ".1f"),
    ("frames_trained_per_s", "trained/s", 9, ".1f"),
    ("collector_wait_fraction", "wait", 6, ".3f"),
    ("collector_stepping_fraction", "stepping", 8, ".3f"),
    ("policy_lag_p50", "lag p50", 7, ".1f"),
    ("policy_lag_p99", "p99", 5, ".1f"),
    ("dropped_fraction", "dropped", 7, ".3f"),
    ("learner_busy_fraction", "learner", 7, ".3f"),
)


def table(report: dict) -> str:
    """The report's figures as a readable table (one row per task and arm; "-": not measured)."""
    rows = [f"{'task':9} {'arm':15} " + " ".join(h.rjust(w) for _, h, w, _ in COLUMNS)]
    for task, arms in report["tasks"].items():
        for arm, f in arms.items():
            if isinstance(f, dict) and "frames_per_s" in f:
                cells = (f"{f[k]:{spec}}" if k in f else "-" for k, _, _, spec in COLUMNS)
                widths = (w for _, _, w, _ in COLUMNS)
                rows.append(f"{task:9} {arm:15} " + " ".join(map(str.rjust, cells, widths)))
    return "\n".join(rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m services.bench async",
        description=__doc__.split("\n\n")[0],
        epilog="examples:\n  python -m services.bench async --tasks cartpole --repeats 1\n"
        "  python -m services.bench async --sample-factory /work/sfvenv/bin/python",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--tasks", default=",".join(TASKS), help="comma-separated, of " + str(TASKS)
    )
    parser.add_argument("--repeats", type=int, default=2, help="runs per arm, taking turns")
    parser.add_argument("--cartpole-frames", type=int, default=200_000, help="frames per run")
    parser.add_argument("--pong-frames", type=int, default=200_000, help="emulator frames per run")
    parser.add_argument("--arms", default=None, help="LOCKSTEP,ASYNC algorithms (default: found)")
    parser.add_argument("--sample-factory", metavar="PYTHON", help="an interpreter with SF 2.1")
    parser.add_argument("--sf-timeout", type=float, default=900.0, help="seconds per SF run")
    args = parser.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not args.tasks or set(args.tasks) - set(TASKS):
        parser.error(f"--tasks: choose from {TASKS}")
    args.arms = tuple(args.arms.split(",")) if args.arms else compared_arms()
    loops = tuple(ALGORITHMS[a].loop if a in ALGORITHMS else None for a in args.arms)
    if loops != LOOPS:
        parser.error(f"--arms: a {LOOPS[0]} algorithm, then an {LOOPS[1]} one, got {loops}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints its JSON line; returns the exit code."""
    args = parse_args(argv)
    lockstep, asynchronous = args.arms
    report: dict = {"tasks": {}}
    with tempfile.TemporaryDirectory(prefix="relayrl-async-bench-") as root:
        budgets = {"cartpole": args.cartpole_frames, "pong": args.pong_frames}
        init_local_ray(log_to_driver=False)
        try:
            for task in args.tasks:
                configs = arm_configs(task, args.arms, budgets[task], Path(root))
                runs: dict[str, list[dict]] = {lockstep: [], asynchronous: []}
                for repeat in range(args.repeats):
                    for arm, config in zip(args.arms, configs, strict=True):
                        runs[arm].append(run_once(config, lockstep=arm == lockstep))
                        line = json.dumps(runs[arm][-1])
                        print(f"{task} {arm} repeat {repeat}: {line}", file=sys.stderr, flush=True)
                result: dict = {arm: averaged(values) for arm, values in runs.items()}
                result[f"{asynchronous}_over_{lockstep}_frames_per_s"] = round(
                    result[asynchronous]["frames_per_s"] / result[lockstep]["frames_per_s"], 3
                )
                result["frames_budget"] = budgets[task]
                result["configs"] = {c.algorithm: f"{task}_{c.algorithm}.yaml" for c in configs}
                report["tasks"][task] = result
        finally:
            ray.shutdown()
        if args.sample_factory and "cartpole" in args.tasks:
            config = arm_configs("cartpole", args.arms, args.cartpole_frames, Path(root))[1]
            peer = []
            for repeat in range(args.repeats):
                train_dir = Path(root) / f"sample-factory-{repeat}"
                command = sample_factory_command(
                    args.sample_factory, config, args.cartpole_frames, train_dir
                )
                peer.append(run_sample_factory(command, args.sf_timeout))
                print(f"sample_factory repeat {repeat}: {json.dumps(peer[-1])}", file=sys.stderr)
            cartpole = report["tasks"]["cartpole"]
            cartpole["sample_factory"] = {**averaged(peer), "command": command[1:]}
            ours, peer_mean = cartpole[asynchronous], cartpole["sample_factory"]["frames_per_s"]
            for key in ("frames_per_s", "frames_trained_per_s"):
                ratio = round(ours[key] / peer_mean, 3)
                cartpole[f"{asynchronous}_over_sample_factory_{key}"] = ratio
    report["machine"] = {"cpu_count": os.cpu_count(), "platform": platform.platform()}
    report["args"] = dict(vars(args))
    print(table(report), file=sys.stderr, flush=True)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
