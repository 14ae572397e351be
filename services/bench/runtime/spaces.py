"""``python -m services.bench spaces``: what a ``Dict`` observation costs collection, per frame.

The same env (:class:`collector.envs.testing.CameraEnv`: a ``[size, size, 3]`` uint8 camera
frame and a 4-vector state) is collected two ways, alternating in one process so both see the
same machine load:

* ``dict``: its ``Dict`` observation, flattened by key path (``collector.envs.spaces``), each
  key its own replay column (uint8 image, float32 state);
* ``box``: the same observation flattened to one float32 ``Box`` (gymnasium's
  ``flatten_space``), what a user without ``Dict`` support would do.

Each measurement is a collector's own work without Ray: a vector env stepped by the run's
policy (:class:`~collector.rollout.RolloutWorker`, 3-step transitions) and every rollout written
to a replay table (:class:`~replay.table.ReplayTable`). By default actions are uniform random
(the policy's epsilon is 1, so no network runs: the figure is the observation pipeline's cost,
env included); ``--act`` lets each path's network act greedily (the multi-input encoder's
Nature CNN against an MLP over the flat ``Box``), which measures the networks more than the
pipeline. The last line is JSON with ``dict_over_box_frame_cost``: the median over rounds of
(seconds per frame of ``dict``) / (seconds per frame of ``box``); the target is <= 1.5.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from collector.envs.vector import env_seeds, make_vector_env
from collector.networks.builders import NETWORKS, NetworkOptions, network_for_space
from collector.rollout import RolloutWorker
from replay.table import ReplayTable

ENV = "collector.envs.testing:camera"
KINDS = ("dict", "box")


class Collection:
    """One path: a vector env, its network's epsilon-greedy policy, a worker and a table.

    Args:
        kind: ``dict`` or ``box``.
        num_envs: Sub-envs.
        size: The camera frame's side.
        seed: Seeds the envs and the network.
    """

    def __init__(self, kind: str, num_envs: int, size: int, seed: int) -> None:
        torch.manual_seed(seed)
        kwargs = {"size": size, "flat": kind == "box"}
        self.envs = make_vector_env(ENV, num_envs, env_kwargs=kwargs)
        space, actions = self.envs.single_observation_space, self.envs.single_action_space
        options = NetworkOptions(env_id=ENV, hidden_sizes=(64,))
        name = network_for_space("q_mlp", space)
        self.network = name
        spec = NETWORKS[name](options, space, actions)
        policy = spec.make_policy(spec.build().eval(), np.random.SeedSequence(seed))
        self.worker = RolloutWorker(self.envs, policy, env_seeds(seed, 0, num_envs), n_step=3)
        self.table = ReplayTable(50_000, seed=seed)
        self.seq = 0

    def run(self, seconds: float, steps: int, epsilon: float) -> float:
        """Collects for about ``seconds``; returns seconds per frame (transition stored)."""
        frames, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            batch = self.worker.rollout(steps, {"epsilon": epsilon}, policy_version=0)
            self.table.write(batch.transitions, "bench", self.seq)
            self.seq += 1
            frames += batch.frames
        return (time.perf_counter() - start) / max(frames, 1)


def measure(
    *, rounds: int, seconds: float, num_envs: int, size: int, steps: int, act: bool, seed: int
) -> dict:
    """Alternates the two paths ``rounds`` times; returns the figures (see the module doc)."""
    torch.set_num_threads(1)
    paths = {kind: Collection(kind, num_envs, size, seed) for kind in KINDS}
    epsilon = 0.0 if act else 1.0
    for path in paths.values():
        path.run(min(seconds, 1.0), steps, epsilon)  # warm-up: allocations, first tables
    costs: dict[str, list[float]] = {kind: [] for kind in KINDS}
    ratios = []
    for index in range(rounds):
        order = KINDS if index % 2 == 0 else KINDS[::-1]
        for kind in order:
            costs[kind].append(paths[kind].run(seconds, steps, epsilon))
        ratios.append(costs["dict"][-1] / costs["box"][-1])
    for path in paths.values():
        path.envs.close()
    return {
        "bench": "spaces",
        "env": ENV,
        "image": [size, size, 3],
        "num_envs": num_envs,
        "acting": "greedy networks" if act else "uniform random (no network)",
        "networks": {kind: paths[kind].network for kind in KINDS},
        "rounds": rounds,
        "dict_frames_per_s": round(1 / statistics.median(costs["dict"]), 1),
        "box_frames_per_s": round(1 / statistics.median(costs["box"]), 1),
        "ratios": [round(r, 3) for r in ratios],
        "dict_over_box_frame_cost": round(statistics.median(ratios), 3),
        "target": 1.5,
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints a JSON line last."""
    parser = argparse.ArgumentParser(prog="python -m services.bench spaces", description=__doc__)
    parser.add_argument("--rounds", type=int, default=6, help="alternations of the two paths")
    parser.add_argument("--seconds", type=float, default=3.0, help="per path and round")
    parser.add_argument("--envs", type=int, default=8, help="sub-envs of each vector env")
    parser.add_argument("--size", type=int, default=64, help="the camera frame's side")
    parser.add_argument("--steps", type=int, default=32, help="vector steps per rollout")
    parser.add_argument("--act", action="store_true", help="greedy networks act (else random)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = measure(
        rounds=args.rounds,
        seconds=args.seconds,
        num_envs=args.envs,
        size=args.size,
        steps=args.steps,
        act=args.act,
        seed=args.seed,
    )
    print(json.dumps(result))
    return 0
