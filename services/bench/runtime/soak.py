"""``python -m services.bench soak``: a long run with faults injected on a schedule.

One DQN run on CartPole on an embedded local Ray, for ``--minutes``. Every
``--fault-every-s`` seconds one process is SIGKILLed by pid, in turn: a collector, a replay
shard, a learner rank (as an operator would). Every ``--sample-every-s`` seconds the resident
memory (``VmRSS``) of every actor process is read from ``/proc``.

Reported:

- ``faults_injected`` and ``faults_survived`` (a fault is survived when the run counted new
  frames and finished optimizer rounds after it, and the run ended by itself);
- ``frames_exact``: the driver's frame count equals the frames of the counted rollout receipts
  and the items the replay shards acknowledged in their write receipts (two independent
  sources: what collectors stepped, what shards stored);
- ``rss_growth_pct`` per actor kind: per process, the growth of its resident memory from the
  end of warm-up (``--warmup-frac`` of its lifetime in the run, at least one sample) to its last
  sample; the largest over the processes of that kind that lived long enough to measure;
- ``frames_lost``: frames of rollouts that failed with their collector (never counted).

Targets (issue #15): every fault survived, frames exact, memory growth of every actor kind
under 10 % after warm-up.

Examples:
    python -m services.bench soak --minutes 10
    python -m services.bench soak --minutes 3 --fault-every-s 20
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import tempfile
import time
from pathlib import Path

import ray

from replay.local_ray import init_local_ray
from services.config import load_config


def rss_kib(pid: int) -> int | None:
    """Resident memory of a process in KiB (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def actor_pids(controller) -> dict[str, int]:
    """``{"collector-0": pid, "replay-1": pid, "learner-0": pid}`` of the live actors."""
    pids = {}
    calls = {f"collector-{i}": a.pid.remote() for i, a in enumerate(controller.collectors.actors)}
    calls |= {f"replay-{i}": s.health.remote() for i, s in enumerate(controller.shards)}
    calls |= {f"learner-{i}": r.pid.remote() for i, r in enumerate(controller.learners.ranks)}
    for name, ref in calls.items():
        try:
            reply = ray.get(ref, timeout=30)
        except (ray.exceptions.RayError, TimeoutError):
            continue  # restarting: measured at the next sample
        pids[name] = reply["pid"] if isinstance(reply, dict) else int(reply)
    return pids


def growth_pct(series: dict[tuple[str, int], list[int]], warmup_frac: float) -> dict[str, float]:
    """Largest post-warm-up growth per actor kind (see the module docstring)."""
    worst: dict[str, float] = {}
    for (name, _pid), samples in series.items():
        kind = name.split("-")[0]
        start = max(1, int(len(samples) * warmup_frac))
        if len(samples) - start < 2:
            continue  # too short a life to measure
        base = samples[start]
        pct = 100.0 * (samples[-1] - base) / base
        worst[kind] = round(max(worst.get(kind, float("-inf")), pct), 2)
    return worst


class Soak:
    """The hooks of one soak run: the fault schedule, memory samples, receipt accounting."""

    ORDER = ("collector", "replay", "learner")

    def __init__(self, args) -> None:
        self.args = args
        self.started = time.monotonic()
        self.next_fault = self.started + args.fault_every_s
        self.next_sample = self.started
        self.faults: list[dict] = []
        self.series: dict[tuple[str, int], list[int]] = {}
        self.receipt_frames = 0
        self.acknowledged_items = 0
        self.rounds = 0

    def on_rollout(self, controller, receipt) -> None:
        """Counts a receipt's frames and acknowledged items; samples and injects when due."""
        self.receipt_frames += receipt.frames
        self.acknowledged_items += sum(len(w.indices) for w in receipt.writes)
        self.tick(controller)

    def on_round(self, controller, receipt) -> None:
        """Counts a finished learner round."""
        self.rounds += 1

    def tick(self, controller) -> None:
        """Samples memory, injects the next fault and ends the soak, each when due."""
        now = time.monotonic()
        if now >= self.next_sample:
            self.next_sample = now + self.args.sample_every_s
            for name, pid in actor_pids(controller).items():
                rss = rss_kib(pid)
                if rss is not None:
                    self.series.setdefault((name, pid), []).append(rss)
        if now >= self.next_fault and not controller.stop_requested:
            self.next_fault = now + self.args.fault_every_s
            self.inject(controller)
        if now - self.started >= self.args.minutes * 60:
            controller.request_stop("soak time is up")

    def inject(self, controller) -> None:
        """SIGKILLs the next component in turn (collector, replay shard, learner rank) by pid."""
        kind = self.ORDER[len(self.faults) % len(self.ORDER)]
        index = len(self.faults) // len(self.ORDER)
        pids = actor_pids(controller)
        if kind == "collector":
            name = f"collector-{index % len(controller.collectors)}"
        elif kind == "replay":
            name = f"replay-{index % len(controller.shards)}"
        else:
            name = f"learner-{index % len(controller.learners.ranks)}"
        if name not in pids:
            return  # still restarting from the previous fault: try at the next slot
        os.kill(pids[name], signal.SIGKILL)
        c = controller.counters
        self.faults.append(
            {
                "component": name,
                "at_s": round(time.monotonic() - self.started, 1),
                "frames": c.collected_frames,
                "rounds": self.rounds,
                "generation": c.generation,
            }
        )

    def survived(self, controller) -> int:
        """Faults after which the run counted frames and finished rounds again."""
        c = controller.counters
        return sum(
            1 for f in self.faults if c.collected_frames > f["frames"] and self.rounds > f["rounds"]
        )


def main(argv: list[str] | None = None) -> int:
    """Runs the soak; prints one JSON object as the last line."""
    parser = argparse.ArgumentParser(prog="python -m services.bench soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--fault-every-s", type=float, default=45.0)
    parser.add_argument("--sample-every-s", type=float, default=5.0)
    parser.add_argument("--warmup-frac", type=float, default=0.25)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")

    from services.driver.controller import Controller  # torch: after argument parsing

    init_local_ray()
    soak = Soak(args)
    with tempfile.TemporaryDirectory(prefix="relayrl-soak-") as temp:
        config = load_config(
            overrides=[
                "run.name=soak",
                f"run.dir={temp}",
                "controller.total_frames=1000000000",
                "controller.log_interval_s=5",
                "checkpoint.interval_frames=0",
                f"checkpoint.interval_s={max(args.fault_every_s / 2, 5)}",
                "checkpoint.keep=2",
                "collector.max_restarts=1000",
                f"collector.crash_loop_window_s={args.fault_every_s}",
                "replay.max_restarts=1000",
                "metrics.enabled=false",
            ]
        )
        controller = Controller(config, checkpoint_root=Path(temp) / "checkpoints")
        controller.register("rollout", soak.on_rollout)
        controller.register("round", soak.on_round)
        controller.register("progress", lambda ctrl, snapshot: soak.tick(ctrl))
        try:
            summary = controller.run()
        finally:
            ray.shutdown()
    c_frames = summary["frames"]
    result = {
        "minutes": args.minutes,
        "faults_injected": len(soak.faults),
        "faults_survived": soak.survived(controller),
        "faults": soak.faults,
        "frames": c_frames,
        "frames_exact": c_frames == soak.receipt_frames == soak.acknowledged_items,
        "frames_lost": summary["collector_failures"] * config.collector.rollout_frames,
        "replay_items_lost": summary["replay_items_lost"],
        "generation": summary["generation"],
        "rss_growth_pct": growth_pct(soak.series, args.warmup_frac),
        "rss_samples": sum(len(s) for s in soak.series.values()),
        "stop_reason": summary["stop_reason"],
        "episode_return_mean": summary["episode_return_mean"],
    }
    print(json.dumps(result), flush=True)
    return 0
