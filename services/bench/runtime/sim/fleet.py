"""The simulated fleet's actors for ``services.bench scale`` (light: no torch, no driver).

    * :class:`SimNode`: one actor playing a node's collectors and its rollout hub. It takes
      the hub's calls (``submit`` / ``collect``, ``collector.manage.hub``) and a collector's
      ``rollout`` (for the direct path), runs each logical collector's rollouts one after
      another (``rollout_s`` each, jittered) and answers with real receipts
      (``RolloutReceipt``: replay write receipts, finished episodes, the policy version in
      use), stamped with the time they finished (:class:`TimedReceipt`). Like a real
      collector it applies weights only if newer than its own (calls to a concurrent actor may
      start out of order); it counts what it delivered and the older weights it ignored.
    * :class:`SimShard`: answers the driver's health checks and stats like an empty shard.
    * :class:`SimLearner`: answers each learner round after ``round_s`` with a real
      ``StepReceipt`` and the weights after it.

The driver side that uses them is :mod:`services.bench.runtime.sim.controller`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import itertools
import os
import time

import numpy as np
import ray

from collector.manage.completions import Finished
from collector.manage.hub import RolloutHub
from collector.receipts import RolloutReceipt
from learner.receipts import StepReceipt
from replay.receipts import WriteReceipt


@dataclasses.dataclass(frozen=True)
class TimedReceipt(RolloutReceipt):
    """A rollout receipt that also says when its rollout finished (``time.time()``)."""

    finished_at: float = 0.0


@dataclasses.dataclass(frozen=True)
class Program:
    """What the simulated services do.

    Attributes:
        rollout_s: Mean seconds of one rollout (each logical collector runs its own in turn).
        jitter: Relative spread of rollout times (uniform, +-).
        episode_every: A collector finishes an episode every this many rollouts.
        episode_return: The return of every finished episode.
        num_shards: Replay shards the writes are spread over.
        round_s: Seconds of one learner round.
        seed: Seed of the jitter.
    """

    rollout_s: float
    jitter: float = 0.2
    episode_every: int = 4
    episode_return: float = 20.0
    num_shards: int = 2
    round_s: float = 0.01
    seed: int = 0


class SimNode(RolloutHub):
    """Logical collectors ``first .. first + count - 1`` and their hub, in one actor.

    The hub's side is the production :class:`~collector.manage.hub.RolloutHub`'s (``collect``,
    ``exchange``); only ``submit`` schedules the rollouts here instead of calling collectors.

    Args:
        first: Index of its first collector.
        count: Collectors it plays.
        program: What they do.
    """

    def __init__(self, first: int, count: int, program: Program) -> None:
        super().__init__(f"simnode-{first}")
        self.first, self.program = first, program
        self.rng = np.random.default_rng([program.seed, first])
        self.busy_until = [0.0] * count
        self.seq = [0] * count
        self.version = [(-1, -1)] * count
        self.written = [0] * program.num_shards
        self.delivered = {"rollouts": 0, "frames": 0, "stale_weights": 0}
        self._due: list = []  # (time, order, item)
        self._order = itertools.count()
        self._wake: asyncio.Event | None = None
        self._clock: asyncio.Task | None = None

    def _wake_clock(self) -> None:
        if self._clock is None:  # created on the actor's event loop
            self._wake = asyncio.Event()
            self._clock = asyncio.ensure_future(self._run_clock())
        self._wake.set()

    def _schedule(self, item, index: int, frames: int, weights) -> None:
        local = index - self.first
        if weights is not None:
            key = (weights.generation, weights.version)
            if key < self.version[local]:
                self.delivered["stale_weights"] += 1
            self.version[local] = max(self.version[local], key)
        spread = 1.0 + self.program.jitter * (2.0 * self.rng.random() - 1.0)
        start = max(time.time(), self.busy_until[local])
        self.busy_until[local] = finish = start + self.program.rollout_s * spread
        heapq.heappush(self._due, (finish, next(self._order), item, index, frames))
        self._wake_clock()

    def _receipt(self, index: int, frames: int, finished_at: float) -> TimedReceipt:
        local = index - self.first
        self.seq[local] += 1
        seq = self.seq[local]
        shard = index % self.program.num_shards
        start = self.written[shard]
        self.written[shard] += frames
        write = WriteReceipt(
            shard, f"sim-{index}", seq, np.arange(start, start + frames), self.written[shard]
        )
        episode = seq % self.program.episode_every == 0
        generation, version = self.version[local]
        self.delivered["rollouts"] += 1
        self.delivered["frames"] += frames
        return TimedReceipt(
            collector_id=index,
            seq=seq,
            frames=frames,
            episode_returns=(self.program.episode_return,) if episode else (),
            episode_lengths=(int(self.program.episode_return),) if episode else (),
            policy_generation=generation,
            policy_version=version,
            writes=(write,),
            rollout_s=self.program.rollout_s,
            write_s=0.0,
            finished_at=finished_at,
        )

    async def _run_clock(self) -> None:
        wake = self._wake
        while True:
            if not self._due:
                await wake.wait()
                wake.clear()
                continue
            delay = self._due[0][0] - time.time()
            if delay > 0:
                wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake.wait(), delay)
                continue
            now = time.time()
            while self._due and self._due[0][0] <= now:
                finish, _, item, index, frames = heapq.heappop(self._due)
                receipt = self._receipt(index, frames, finish)
                if isinstance(item, asyncio.Future):
                    item.set_result(receipt)
                else:
                    self._finished(Finished(item, index, receipt=receipt))

    # -- the hub's calls -------------------------------------------------------------------
    async def submit(self, orders) -> int:
        """Takes rollout orders ``(ticket, collector, frames, explore, weights)``."""
        for ticket, index, frames, _, weights in orders:
            self._schedule(ticket, index, frames, weights)
        return len(orders)

    # -- a collector's calls ---------------------------------------------------------------
    async def rollout(self, index: int, frames: int, explore=None, weights=None) -> TimedReceipt:
        """One rollout of collector ``index`` (the direct path)."""
        future = asyncio.get_running_loop().create_future()
        self._schedule(future, index, frames, weights)
        return await future

    def set_weights(self, weights, indices: list[int]) -> None:
        """Hands ``weights`` to collectors ``indices``."""
        for index in indices:
            local = index - self.first
            key = (weights.generation, weights.version)
            if key < self.version[local]:
                self.delivered["stale_weights"] += 1
            self.version[local] = max(self.version[local], key)

    def policy_versions(self) -> list[tuple[int, int]]:
        """``(generation, version)`` each of its collectors holds."""
        return list(self.version)

    def stats(self) -> dict:
        """Rollouts and frames delivered, and older weights ignored."""
        return dict(self.delivered)

    def node_id(self) -> str:
        """A name for this simulated node."""
        return f"simnode-{self.first:05d}"


class SimShard:
    """Answers the driver's health checks and stats like an empty replay shard."""

    def __init__(self, shard_id: int) -> None:
        self.shard_id = shard_id
        self.incarnation = os.urandom(4).hex()

    def health(self) -> dict:
        """Incarnation, size, node and process."""
        node = ray.get_runtime_context().get_node_id()
        return {"incarnation": self.incarnation, "size": 0, "node": node, "pid": os.getpid()}

    def info(self) -> dict:
        """Size and sampling mass."""
        return {"size": 0, "remaining": 0, "priority_sum": 0.0}

    def stats(self) -> dict:
        """Size and counters."""
        return {
            "shard_id": self.shard_id,
            "size": 0,
            "write_count": 0,
            "sample_count": 0,
            "priority_updates": 0,
        }


class SimLearner:
    """One learner rank that answers each round after ``round_s`` seconds."""

    def __init__(self, round_s: float) -> None:
        self.round_s = round_s
        self.version = 0

    async def step(self, round_id: int, steps: int, generation: int):
        """A round of ``steps`` optimizer steps: its receipt and the weights after it."""
        await asyncio.sleep(self.round_s)
        self.version += steps
        receipt = StepReceipt(
            generation=generation,
            round_id=round_id,
            rank=0,
            optim_steps=steps,
            model_version=self.version,
            metrics={"loss_q": 0.5, "grad_norm": 1.0, "nonfinite_skipped": 0.0},
            samples=steps * 32,
            sample_s=0.0,
            train_s=self.round_s,
            finished_at=time.time(),
        )
        return receipt, {"weights": np.zeros(4, np.float32), "version": self.version}

    def ping(self) -> bool:
        """Liveness probe."""
        return True
