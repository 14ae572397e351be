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

Frames are counted alike on both sides: transitions, that is env steps other than gymnasium's
auto-reset steps (in ``NEXT_STEP`` mode an env spends one step on each reset, which yields no
transition; a collector cannot write it and the raw loop does not count it).

Raw and collector figures alternate on one Ray instance, first for one copy, then for two:
``R C R C ... C R`` with ``--rounds`` collector figures per block, each lying between two raw
figures. The raw loops run in Ray actor processes (their loop makes no Ray call), so the OS
schedules them exactly like collectors: Ray starts workers at niceness 15, and on Linux with
autogroup scheduling all processes of a session share one CPU share; on a machine shared with
other work, a raw loop in a plain process would get more CPU than any Ray worker and the ratio
would measure priority rather than collection overhead.
``ratio_one`` is one collector over one raw loop, ``ratio_two`` two collectors over two parallel
raw loops (on a machine whose cores do not add up, N collectors compete like N raw loops do).
Each round's ratio sets the collector figure against the mean of the raw figures just before and
just after it (its bracket), so load from other work that drifts during the round cancels to
first order; ``ratio_one`` and ``ratio_two`` are the medians over rounds, and
``ratio_one_rounds`` / ``ratio_two_rounds`` list every round's ratio. The ``*_fps`` figures are
medians over their block.
Rollouts default to 8192 frames: a rollout's fixed costs (the replay write, the receipt, the
driver's round trip, the shard's call) are paid once per rollout; 2048-frame rollouts measured
about 0.8 of the raw loop on the 2-core development machine. The last line of output is one
JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import statistics
import time
from pathlib import Path

import numpy as np
import ray
import torch

from collector.env import env_seeds, make_vector_env
from collector.group import CollectorGroup
from collector.networks.q_mlp import ModelSpec
from replay.local_ray import init_local_ray
from replay.shard import remote_shard

logger = logging.getLogger("collector.bench")
ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "CartPole-v1"
SPEC = ModelSpec(obs_dim=4, num_actions=2, hidden_sizes=(64, 64))


@dataclasses.dataclass(frozen=True)
class BenchWeights:
    """Duck-typed ``PublishedWeights`` (the collector package does not import the learner)."""

    generation: int
    version: int
    ref: ray.ObjectRef


class RawLoop:
    """The limit: a vector env stepped with the policy, nothing stored, no Ray call in the loop.

    It runs as a Ray actor so that it is scheduled exactly like a collector (same niceness,
    same scheduler group); only its loop is measured.
    """

    def __init__(self, num_envs: int, epsilon: float, seed: int) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        self.num_envs = num_envs
        self.epsilon = epsilon
        self.envs = make_vector_env(ENV_ID, num_envs)
        self.policy = SPEC.make_policy(SPEC.build().eval(), np.random.SeedSequence(seed))
        self.obs, _ = self.envs.reset(seed=env_seeds(seed, 0, num_envs))

    def run(self, seconds: float) -> float:
        """Steps for ``seconds`` and returns frames (transitions) per second."""
        act, step, obs, epsilon = self.policy.act, self.envs.step, self.obs, self.epsilon
        steps = episodes = 0
        with torch.inference_mode():
            start = time.perf_counter()
            while (now := time.perf_counter()) - start < seconds:
                for _ in range(128):
                    actions, _ = act(obs, epsilon)
                    obs, _, terminated, truncated, _ = step(actions)
                    episodes += np.count_nonzero(terminated | truncated)
                steps += 128
        self.obs = obs
        # Each episode end costs the env one auto-reset step that is no transition.
        return (steps * self.num_envs - episodes) / (now - start)


class RawLoops:
    """Raw-loop actors; ``measure(k, s)`` runs ``k`` of them at once and sums their rates."""

    def __init__(self, count: int, num_envs: int, epsilon: float) -> None:
        actor_cls = ray.remote(num_cpus=0)(RawLoop)
        self.actors = [actor_cls.remote(num_envs, epsilon, i) for i in range(count)]
        ray.get([a.run.remote(0.1) for a in self.actors])

    def measure(self, copies: int, seconds: float) -> float:
        """Runs ``copies`` raw loops at once for ``seconds``; returns their summed frames/s."""
        return sum(ray.get([a.run.remote(seconds) for a in self.actors[:copies]]))

    def close(self) -> None:
        """Kills the actors."""
        for actor in self.actors:
            ray.kill(actor)


class CollectorRig:
    """A CollectorGroup with one shard per collector, driven like the controller drives it."""

    def __init__(self, name: str, count: int, args: argparse.Namespace) -> None:
        self.args = args
        self.shards = [remote_shard(name, i, args.shard_capacity, num_cpus=0) for i in range(count)]
        self.group = CollectorGroup(
            name, count, ENV_ID, args.envs, SPEC, self.shards, seed=0, num_cpus=0
        )
        self.group.wait_ready()
        self.version = 0
        self.weights = self._publish()

    def _publish(self) -> BenchWeights:
        net = SPEC.build()
        self.version += 1
        return BenchWeights(0, self.version, ray.put(net.state_dict()))

    def measure(self, seconds: float, warmup_s: float) -> float:
        """Frames/s over ``seconds`` of receipts, after ``warmup_s`` of collection."""
        args, group = self.args, self.group
        inflight = {}

        def issue(index: int) -> None:
            ref = group.rollout(index, args.rollout_frames, args.epsilon, self.weights)
            inflight[ref] = index

        for index in range(len(group)):
            for _ in range(args.max_inflight):
                issue(index)
        start = time.perf_counter()
        next_publish = start + args.publish_every_s
        t_first = None
        frames = 0
        now = start
        stepping = []
        while t_first is None or now - t_first < seconds:
            [ref], _ = ray.wait(list(inflight), num_returns=1)
            receipt = ray.get(ref)
            now = time.perf_counter()
            issue(inflight.pop(ref))
            if now >= next_publish:
                self.weights = self._publish()
                next_publish = now + args.publish_every_s
            if t_first is not None:
                frames += receipt.frames
                stepping.append((receipt.frames_per_s, receipt.write_s))
            elif now - start >= warmup_s:
                t_first = now  # frames of receipts after this one, over the time after it
        elapsed = now - t_first
        ray.get(list(inflight))
        logger.info(
            "%d collector(s): %.0f frames/s while stepping, write ack %.1f ms, %d receipts",
            len(group),
            statistics.mean(s for s, _ in stepping),
            1e3 * statistics.mean(w for _, w in stepping),
            len(stepping),
        )
        return frames / elapsed

    def close(self) -> None:
        """Kills the collectors and shards."""
        self.group.shutdown()
        for shard in self.shards:
            ray.kill(shard, no_restart=True)


def main(argv: list[str] | None = None) -> dict:
    """Runs the benchmark and prints its JSON summary as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measured seconds per figure")
    parser.add_argument("--warmup-s", type=float, default=0.5, help="collector warm-up seconds")
    parser.add_argument("--rounds", type=int, default=7, help="alternating measurement rounds")
    parser.add_argument("--envs", type=int, default=8, help="envs per loop / collector")
    parser.add_argument("--rollout-frames", type=int, default=8192, help="frames per rollout")
    parser.add_argument("--max-inflight", type=int, default=2, help="rollouts per collector")
    parser.add_argument("--epsilon", type=float, default=0.05, help="exploration rate")
    parser.add_argument("--publish-every-s", type=float, default=0.1, help="weights cadence")
    parser.add_argument("--shard-capacity", type=int, default=200_000, help="per shard")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    init_local_ray()
    raw = RawLoops(2, args.envs, args.epsilon)
    rigs = {1: CollectorRig("bench1", 1, args), 2: CollectorRig("bench2", 2, args)}
    # copies -> (raw figure, collector figure, ratio)
    names = {
        1: ("raw_loop_fps", "one_collector_fps", "ratio_one"),
        2: ("raw_loop_x2_fps", "two_collectors_fps", "ratio_two"),
    }
    figures: dict[str, list[float]] = {name: [] for row in names.values() for name in row[:2]}
    try:
        # Raw and collector figures alternate, R C R C ... R, one block per collector count, so
        # every collector figure lies between two raw figures (its bracket).
        for copies, (raw_name, collector_name, _) in names.items():
            figures[raw_name].append(raw.measure(copies, args.seconds))
            for round_index in range(args.rounds):
                figures[collector_name].append(rigs[copies].measure(args.seconds, args.warmup_s))
                figures[raw_name].append(raw.measure(copies, args.seconds))
                logger.info(
                    "x%d round %d: raw %.0f, collectors %.0f, raw %.0f",
                    copies,
                    round_index,
                    figures[raw_name][-2],
                    figures[collector_name][-1],
                    figures[raw_name][-1],
                )
    finally:
        for rig in rigs.values():
            rig.close()
        raw.close()
        ray.shutdown()
    result = {k: round(statistics.median(v), 1) for k, v in figures.items()}
    # Each collector figure is set against the mean of the raw figures measured just before
    # and just after it, so load that drifts across the round cancels to first order; the
    # ratio is the median over rounds.
    for raw_name, collector_name, name in names.values():
        brackets = [(a + b) / 2 for a, b in itertools.pairwise(figures[raw_name])]
        ratios = [c / r for c, r in zip(figures[collector_name], brackets, strict=True)]
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
