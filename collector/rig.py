"""The raw loop and the collector rig that benchmarks set side by side, for any env and spec.

``collector.bench`` (CartPole, an MLP) and ``services.bench atari`` (Pong, the Nature CNN)
measure collection against its physical limit the same way:

* :class:`RawLoop`: one process stepping the vector env with the policy, nothing stored and no
  Ray call in the loop. It runs as a Ray actor (:class:`RawLoops`) so that the OS schedules it
  exactly like a collector: Ray starts workers at niceness 15, and with Linux's autogroup
  scheduling all processes of a session share one CPU share, so a raw loop in a plain process
  would get more CPU than any Ray worker and the ratio would measure priority.
* :class:`CollectorRig`: a :class:`~collector.manage.group.CollectorGroup` with one replay shard per
  collector, driven like the controller drives it (rollouts in flight, weights handed over with
  the next rollout).
* :func:`alternate` runs raw and collector windows in turn, ``R C R ... C R``, and
  :func:`bracket_ratios` sets each collector window against the mean of the raw windows just
  before and after it, so load from other work that drifts during a window cancels to first
  order.

Both sides count transitions: env steps other than gymnasium's auto-reset steps (in
``NEXT_STEP`` mode an env spends one step on each reset, which yields no transition).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import logging
import statistics
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import ray
import torch

from collector.envs.vector import env_seeds, make_vector_env
from collector.manage.group import CollectorGroup
from collector.networks import NetworkSpec
from replay.shard import remote_shard

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BenchTask:
    """The env a rig steps and the network it steps it with.

    Attributes:
        env_id: Gymnasium id or ``module:function`` env factory.
        spec: Network spec of the epsilon-greedy policy.
        env_kwargs: Keyword arguments of the env.
        n_step: Steps per transition window of the collectors.
        frame_stack: Collectors write frame streams to frame-deduplicated shards (0: off).
    """

    env_id: str
    spec: NetworkSpec
    env_kwargs: Mapping[str, Any] | None = None
    n_step: int = 1
    frame_stack: int = 0


@dataclasses.dataclass(frozen=True)
class BenchWeights:
    """Duck-typed ``PublishedWeights`` (the collector package does not import the learner)."""

    generation: int
    version: int
    ref: ray.ObjectRef


class RawLoop:
    """The limit: a vector env stepped with the policy, nothing stored, no Ray call in the loop.

    Args:
        task: The env and network.
        num_envs: Sub-envs of the vector env.
        epsilon: Exploration rate of the policy.
        seed: Seed of the envs, the network and the exploration.
        chunk: Vector steps between two looks at the clock.
    """

    def __init__(
        self, task: BenchTask, num_envs: int, epsilon: float, seed: int, chunk: int = 128
    ) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        self.num_envs = num_envs
        self.epsilon = epsilon
        self.chunk = chunk
        self.envs = make_vector_env(task.env_id, num_envs, env_kwargs=task.env_kwargs)
        self.policy = task.spec.make_policy(task.spec.build().eval(), np.random.SeedSequence(seed))
        self.obs, _ = self.envs.reset(seed=env_seeds(seed, 0, num_envs))

    def run(self, seconds: float) -> float:
        """Steps for ``seconds`` and returns frames (transitions) per second."""
        act, step, obs, epsilon = self.policy.act, self.envs.step, self.obs, self.epsilon
        chunk = self.chunk
        steps = episodes = 0
        with torch.inference_mode():
            start = time.perf_counter()
            while (now := time.perf_counter()) - start < seconds:
                for _ in range(chunk):
                    actions, _ = act(obs, epsilon)
                    obs, _, terminated, truncated, _ = step(actions)
                    episodes += np.count_nonzero(terminated | truncated)
                steps += chunk
        self.obs = obs
        # Each episode end costs the env one auto-reset step that is no transition.
        return (steps * self.num_envs - episodes) / (now - start)


class RawLoops:
    """Raw-loop actors; ``measure(k, s)`` runs ``k`` of them at once and sums their rates.

    Args:
        task: The env and network.
        count: Raw-loop actors (the most copies :meth:`measure` can run).
        num_envs: Sub-envs of each loop.
        epsilon: Exploration rate.

    Keyword Args:
        chunk: Vector steps between two looks at the clock.
        first_seed: Seed of the first loop (the others count up from it).
        warmup_s: Seconds each loop runs before it is measured.
    """

    def __init__(
        self,
        task: BenchTask,
        count: int,
        num_envs: int,
        epsilon: float,
        *,
        chunk: int = 128,
        first_seed: int = 0,
        warmup_s: float = 0.1,
    ) -> None:
        actor_cls = ray.remote(num_cpus=0)(RawLoop)
        self.actors = [
            actor_cls.remote(task, num_envs, epsilon, first_seed + i, chunk) for i in range(count)
        ]
        ray.get([a.run.remote(warmup_s) for a in self.actors])

    def measure(self, copies: int, seconds: float) -> float:
        """Runs ``copies`` raw loops at once for ``seconds``; returns their summed frames/s."""
        return sum(ray.get([a.run.remote(seconds) for a in self.actors[:copies]]))

    def close(self) -> None:
        """Kills the actors."""
        for actor in self.actors:
            ray.kill(actor)


class CollectorRig:
    """A CollectorGroup with one shard per collector, driven like the controller drives it.

    Args:
        name: Run name of the collectors and shards.
        count: Collectors (and shards).
        task: The env and network.

    Keyword Args:
        envs: Sub-envs per collector.
        rollout_frames: Frames per rollout.
        epsilon: Exploration rate.
        shard_capacity: Transitions per shard.
        max_inflight: Rollouts in flight per collector.
        publish_every_s: Seconds between new weights (handed over with the next rollout);
            None keeps the first ones.
    """

    def __init__(
        self,
        name: str,
        count: int,
        task: BenchTask,
        *,
        envs: int,
        rollout_frames: int,
        epsilon: float,
        shard_capacity: int,
        max_inflight: int = 2,
        publish_every_s: float | None = None,
    ) -> None:
        self.task = task
        self.rollout_frames = rollout_frames
        self.epsilon = epsilon
        self.max_inflight = max_inflight
        self.publish_every_s = publish_every_s
        self.shards = [
            remote_shard(name, i, shard_capacity, num_cpus=0, frame_stack=task.frame_stack)
            for i in range(count)
        ]
        self.group = CollectorGroup(
            name,
            count,
            task.env_id,
            envs,
            task.spec,
            self.shards,
            seed=0,
            num_cpus=0,
            max_restarts=0,
            env_kwargs=task.env_kwargs,
            n_step=task.n_step,
            frame_stack=task.frame_stack,
        )
        self.group.wait_ready()
        torch.manual_seed(0)
        self.version = 0
        self.weights = self._publish()

    def _publish(self) -> BenchWeights:
        net = self.task.spec.build()
        self.version += 1
        return BenchWeights(0, self.version, ray.put(net.state_dict()))

    def measure(self, seconds: float, warmup_s: float) -> float:
        """Frames/s over ``seconds`` of receipts, after ``warmup_s`` of collection."""
        group = self.group
        inflight = {}

        def issue(index: int) -> None:
            ref = group.rollout(index, self.rollout_frames, self.epsilon, self.weights)
            inflight[ref] = index

        for index in range(len(group)):
            for _ in range(self.max_inflight):
                issue(index)
        start = time.perf_counter()
        publish_every_s = self.publish_every_s
        next_publish = float("inf") if publish_every_s is None else start + publish_every_s
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
                next_publish = now + publish_every_s
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

    def close(self, *, shards: bool = True) -> None:
        """Kills the collectors, and the shards unless ``shards`` is False (kept for later use)."""
        self.group.shutdown()
        if shards:
            for shard in self.shards:
                ray.kill(shard, no_restart=True)


def alternate(
    raw: RawLoops, rig: CollectorRig, *, rounds: int, seconds: float, warmup_s: float
) -> tuple[list[float], list[float]]:
    """Raw and collector windows in turn, ``R C R ... C R``, as many raw copies as collectors.

    Returns:
        The raw figures (``rounds + 1``) and the collector figures (``rounds``), in frames/s;
        collector figure ``i`` lies between raw figures ``i`` and ``i + 1``.
    """
    copies = len(rig.group)
    raw_figures, collector_figures = [raw.measure(copies, seconds)], []
    for index in range(rounds):
        collector_figures.append(rig.measure(seconds, warmup_s))
        raw_figures.append(raw.measure(copies, seconds))
        logger.info(
            "x%d round %d: raw %.0f, collectors %.0f, raw %.0f",
            copies,
            index,
            raw_figures[-2],
            collector_figures[-1],
            raw_figures[-1],
        )
    return raw_figures, collector_figures


def bracket_ratios(raw_figures: list[float], collector_figures: list[float]) -> list[float]:
    """Each collector figure over the mean of the raw figures just before and just after it.

    Examples:
        >>> bracket_ratios([100.0, 80.0, 90.0], [81.0, 68.0])
        [0.9, 0.8]
    """
    brackets = [(a + b) / 2 for a, b in itertools.pairwise(raw_figures)]
    return [c / r for c, r in zip(collector_figures, brackets, strict=True)]


def add_rig_arguments(
    parser: argparse.ArgumentParser,
    *,
    seconds: float = 2.0,
    warmup_s: float = 0.5,
    rounds: int = 7,
    envs: int = 8,
    rollout_frames: int = 8192,
    shard_capacity: int = 200_000,
) -> None:
    """Adds the flags of a raw-loop-against-collectors benchmark, with that benchmark's defaults.

    The flags: ``--seconds``, ``--warmup-s``, ``--rounds``, ``--envs``, ``--rollout-frames``,
    ``--epsilon`` (0.05) and ``--shard-capacity``; :func:`rig_options` reads the rig's back.
    The keywords' defaults are ``collector.bench``'s (CartPole).
    """
    parser.add_argument("--seconds", type=float, default=seconds, help="seconds per window")
    parser.add_argument("--warmup-s", type=float, default=warmup_s, help="collector warm-up")
    parser.add_argument("--rounds", type=int, default=rounds, help="collector windows per block")
    parser.add_argument("--envs", type=int, default=envs, help="envs per loop / collector")
    parser.add_argument(
        "--rollout-frames", type=int, default=rollout_frames, help="frames per rollout"
    )
    parser.add_argument("--epsilon", type=float, default=0.05, help="exploration rate")
    parser.add_argument(
        "--shard-capacity", type=int, default=shard_capacity, help="transitions per shard"
    )


def rig_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`CollectorRig` keywords set by :func:`add_rig_arguments`'s flags."""
    return {
        "envs": args.envs,
        "rollout_frames": args.rollout_frames,
        "epsilon": args.epsilon,
        "shard_capacity": args.shard_capacity,
    }
