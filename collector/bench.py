"""Collector throughput against the physical limit, measured side by side in one run.

``python -m collector.bench`` measures, on CartPole-v1 with 8 envs and a 4-64-64-2 MLP
epsilon-greedy policy:

* ``raw_loop_fps``: one process stepping the vector env with the policy, nothing stored and no
  Ray call in the loop;
* ``raw_loop_x2_fps``: two such processes run at the same time, their rates summed;
* ``one_collector_fps``: one Collector actor writing to one replay shard, driven like the
  controller drives it (``max_inflight`` rollouts in flight, new weights published every
  ``--publish-every-s`` and handed over with the next rollout);
* ``two_collectors_fps``: two collectors writing to two shards.

Frames are counted alike on both sides (transitions; see :mod:`collector.rig`, which holds the
raw loop, the collector rig and the alternation). Raw and collector figures alternate on one Ray
instance, first for one copy, then for two: ``R C R C ... C R`` with ``--rounds`` collector
figures per block, each lying between two raw figures; the raw loops run in Ray actor processes
(their loop makes no Ray call), so the OS schedules them exactly like collectors.
``ratio_one`` is one collector over one raw loop, ``ratio_two`` two collectors over two parallel
raw loops (on a machine whose cores do not add up, N collectors compete like N raw loops do).
Each round's ratio sets the collector figure against the mean of the raw figures just before and
just after it (its bracket), so load from other work that drifts during the round cancels to
first order; ``ratio_one`` and ``ratio_two`` are the medians over rounds, and
``ratio_one_rounds`` / ``ratio_two_rounds`` list every round's ratio. The ``*_fps`` figures are
medians over their block.
Rollouts default to 8192 frames: a rollout's fixed costs (the replay write, the receipt, the
driver's round trip, the shard's call) are paid once per rollout, so shorter rollouts reach a
smaller share of the raw loop (figures in ``docs/benchmarks.md``). The last line of output is
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics

import ray

from collector import rig
from collector.networks.q_mlp import ModelSpec
from replay.local_ray import init_local_ray

logger = logging.getLogger("collector.bench")
CARTPOLE = rig.BenchTask("CartPole-v1", ModelSpec(obs_dim=4, num_actions=2, hidden_sizes=(64, 64)))


def main(argv: list[str] | None = None) -> dict:
    """Runs the benchmark and prints its JSON summary as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rig.add_rig_arguments(parser)
    parser.add_argument("--max-inflight", type=int, default=2, help="rollouts per collector")
    parser.add_argument("--publish-every-s", type=float, default=0.1, help="weights cadence")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    init_local_ray()
    raw = rig.RawLoops(CARTPOLE, 2, args.envs, args.epsilon)
    rigs = {
        copies: rig.CollectorRig(
            f"bench{copies}",
            copies,
            CARTPOLE,
            max_inflight=args.max_inflight,
            publish_every_s=args.publish_every_s,
            **rig.rig_options(args),
        )
        for copies in (1, 2)
    }
    # copies -> (raw figure, collector figure, ratio)
    names = {
        1: ("raw_loop_fps", "one_collector_fps", "ratio_one"),
        2: ("raw_loop_x2_fps", "two_collectors_fps", "ratio_two"),
    }
    figures: dict[str, list[float]] = {}
    try:
        # One block per collector count, every collector figure between two raw figures.
        for copies, (raw_name, collector_name, _) in names.items():
            figures[raw_name], figures[collector_name] = rig.alternate(
                raw, rigs[copies], rounds=args.rounds, seconds=args.seconds, warmup_s=args.warmup_s
            )
    finally:
        for collectors in rigs.values():
            collectors.close()
        raw.close()
        ray.shutdown()
    result = {k: round(statistics.median(v), 1) for k, v in figures.items()}
    for raw_name, collector_name, name in names.values():
        ratios = rig.bracket_ratios(figures[raw_name], figures[collector_name])
        result[name] = round(statistics.median(ratios), 3)
        result[f"{name}_rounds"] = [round(r, 3) for r in ratios]
    result.update(
        envs=args.envs,
        rollout_frames=args.rollout_frames,
        max_inflight=args.max_inflight,
        seconds=args.seconds,
        rounds=args.rounds,
    )
    print(json.dumps(result))  # the benchmark's result line
    return result


if __name__ == "__main__":
    main()
