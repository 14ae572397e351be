"""``python -m services.bench scale``: the driver alone against simulated fleets of collectors.

The production controller and off-policy loop (:mod:`services.bench.runtime.sim.controller`) drive
10, 100 and 1,000 simulated collectors (``--per-node`` logical collectors per simulated node, each
node its own rollout hub), replay shards and a learner that answer with real receipts. The fleet is
offered the same load at every size: ``--rate`` receipts per second in all (each collector runs its
rollouts one after another, ``collectors / rate`` seconds each) with ``--inflight`` rollouts in
flight in all (``collector.max_inflight`` = ``inflight / collectors``), so what changes from one
size to the next is the fleet alone. The Prometheus exporter is attached, as in a run.

Measured over ``--seconds`` after ``--warmup``, per fleet size:

    * ``receipts_per_s``: rollout receipts the driver counted per second;
    * ``driver_cpu_us_per_receipt``: the driver process's CPU time (every thread, Ray's
      included) per counted receipt; ``driver_cpu_share``: that CPU time over wall time (1.0
      is one core);
    * ``loop_latency_ms_p50`` / ``_p99``: from a rollout's end (its simulated finish) to the
      driver counting its receipt;
    * ``frames_exact``: after the stop (the driver drains what is in flight), frames counted
      equal frames the simulated collectors delivered, rollouts likewise, and versions are
      monotone (``versions_monotone``: learner versions only went up, and no receipt acted
      with a version not yet published);
    * ``metrics_series``: series the driver's ``/metrics`` serves at the end,
      ``rollouts_series`` those of ``relayrl_rollouts_total`` (per collector, or per node past
      ``metrics.max_collector_series``).

``--direct`` sizes are measured again with one driver call per rollout (no hubs) for
comparison. Last line of standard output::

    {"fleet": {"10": {...}, "100": {...}, "1000": {...}}, "direct": {"10": {...}},
     "targets": {"receipts_per_s_1000": ..., "cost_ratio_1000_vs_10": ...}}

Examples:
    python -m services.bench scale
    python -m services.bench scale --fleets 10,100 --seconds 3 --direct ""
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import threading
import time

from replay.local_ray import init_local_ray
from services.config import load_config
from services.observe.metrics import MetricsExporter


def scale_config(num_collectors: int, args, *, aggregate: bool):
    """An off-policy run of ``num_collectors`` that only a stop ends, learners never behind."""
    max_inflight = max(1, args.inflight // num_collectors)
    return load_config(
        overrides=[
            "run.name=scale",
            f"collector.num_collectors={num_collectors}",
            f"collector.rollout_frames={args.rollout_frames}",
            "collector.envs_per_collector=8",
            f"collector.max_inflight={max_inflight}",
            f"collector.aggregate_min_collectors={1 if aggregate else 0}",
            "replay.num_shards=2",
            "learner.global_batch_size=32",
            "controller.total_frames=1000000000000",
            "controller.init_random_frames=0",
            "controller.utd_ratio=0.001",
            "controller.max_steps_per_round=1000000000",
            "controller.max_lag_steps=1000000000",
            "controller.log_interval_s=1.0",
        ]
    )


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(num_collectors: int, args, *, aggregate: bool) -> dict:
    """One fleet size: set up, warm up, measure a window, stop, drain, check exactness."""
    from services.bench.runtime.sim.controller import Program, SimulatedController

    program = Program(rollout_s=num_collectors / args.rate)
    config = scale_config(num_collectors, args, aggregate=aggregate)
    controller = SimulatedController(config, program, per_node=args.per_node, aggregate=aggregate)
    exporter = MetricsExporter(port=0, run_id=controller.run_id)
    exporter.attach(controller)
    latencies: list[tuple[float, float]] = []
    sampled = itertools.count()
    versions: list[int] = []
    ahead = []  # receipts acting with a version not published yet

    def on_rollout(run, receipt) -> None:
        if next(sampled) % 8 == 0:
            now = time.time()
            latencies.append((now, now - receipt.finished_at))
            if receipt.policy_version > run.counters.published_version:
                ahead.append(receipt)

    controller.register("rollout", on_rollout)
    controller.register("round", lambda _, receipt: versions.append(receipt.model_version))
    window: dict[str, tuple[float, float, float, int]] = {}

    def sample() -> tuple[float, float, float, int]:
        return time.time(), time.perf_counter(), time.process_time(), controller.counters.rollouts

    def timer() -> None:
        time.sleep(args.warmup)
        window["start"] = sample()
        time.sleep(args.seconds)
        window["end"] = sample()
        controller.request_stop("bench window over")

    try:
        controller.setup()
        threading.Thread(target=timer, daemon=True).start()
        controller.train()
        delivered = controller.collectors.delivered()
        families = list(exporter.registry.collect())
        series = sum(len(family.samples) for family in families)
        per_collector = sum(
            sample.name == "relayrl_rollouts_total" for f in families for sample in f.samples
        )
        hubs = len(controller.collectors.hubs)
    finally:
        controller.shutdown()
        exporter.close()
    (t0, wall0, cpu0, n0), (t1, wall1, cpu1, n1) = window["start"], window["end"]
    receipts = max(n1 - n0, 1)
    in_window = [lat for at, lat in latencies if t0 <= at <= t1]
    c = controller.counters
    monotone = versions == sorted(versions) and not ahead
    exact = c.transitions == delivered["frames"] and c.rollouts == delivered["rollouts"]
    return {
        "receipts_per_s": round(receipts / (wall1 - wall0), 1),
        "max_inflight": config.collector.max_inflight,
        "offered_per_s": args.rate,
        "driver_cpu_us_per_receipt": round((cpu1 - cpu0) / receipts * 1e6, 1),
        "driver_cpu_share": round((cpu1 - cpu0) / (wall1 - wall0), 3),
        "loop_latency_ms_p50": round(percentile(in_window, 0.5) * 1e3, 2),
        "loop_latency_ms_p99": round(percentile(in_window, 0.99) * 1e3, 2),
        "frames_exact": exact and monotone,
        "frames": c.collected_frames,
        "frames_delivered": delivered["frames"],
        "rollouts": c.rollouts,
        "versions_monotone": monotone,
        "stale_weights_ignored": delivered["stale_weights"],
        "rounds": len(versions),
        "hubs": hubs,
        "metrics_series": series,
        "rollouts_series": per_collector,
    }


def sizes(text: str) -> list[int]:
    """``"10,100"`` as ``[10, 100]`` (empty: none)."""
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m services.bench scale")
    parser.add_argument("--fleets", default="10,100,1000", help="collector counts, via hubs")
    parser.add_argument("--direct", default="10", help="collector counts, one call per rollout")
    parser.add_argument("--rate", type=float, default=25_000.0, help="receipts/s offered")
    parser.add_argument("--per-node", type=int, default=100, help="collectors per node (hub)")
    parser.add_argument("--rollout-frames", type=int, default=256)
    parser.add_argument("--inflight", type=int, default=2000, help="rollouts in flight in all")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before the window")
    args = parser.parse_args(argv)
    init_local_ray(num_cpus=8)
    report: dict = {"fleet": {}, "direct": {}}
    for mode, counts in (("fleet", sizes(args.fleets)), ("direct", sizes(args.direct))):
        for count in counts:
            result = measure(count, args, aggregate=mode == "fleet")
            print(f"{mode} {count}: {json.dumps(result)}", file=sys.stderr, flush=True)
            report[mode][str(count)] = result
    fleet = report["fleet"]
    if "10" in fleet and "1000" in fleet:
        report["targets"] = {
            "receipts_per_s_1000": fleet["1000"]["receipts_per_s"],
            "cost_ratio_1000_vs_10": round(
                fleet["1000"]["driver_cpu_us_per_receipt"]
                / fleet["10"]["driver_cpu_us_per_receipt"],
                2,
            ),
        }
    report["median_cpu_us_per_receipt"] = (
        round(statistics.median(r["driver_cpu_us_per_receipt"] for r in fleet.values()), 1)
        if fleet
        else None
    )
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
