"""Pong as the pixel benchmarks use it (``services.bench.pixels.atari`` and ``.compiled``).

The task is ``collector.atari``'s DQN preprocessing (frame skip 4, 84x84 grayscale, stacks of
4) with the Nature CNN (``collector.networks.cnn``), collectors writing 3-step frame streams;
learners train on batches of :data:`BATCH`. :func:`frame_stream_writes` records random play
for a replay table and :class:`LocalLoop` is the in-process learner both benchmarks measure
against.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from collector.envs.vector import env_seeds, make_vector_env
from collector.networks.cnn import PixelQSpec
from collector.rig import BenchTask
from collector.rollout import RolloutWorker
from learner.config import LearnerConfig
from learner.core import LearnerCore
from replay.table import ReplayTable

FRAME_STACK = 4
BATCH = 32
PONG = BenchTask(
    "collector.atari:make_atari",
    PixelQSpec(FRAME_STACK, 84, 84, 6),
    env_kwargs={"game": "ALE/Pong-v5"},
    n_step=3,
    frame_stack=FRAME_STACK,
)


def frame_stream_writes(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """About ``count`` Pong transitions of uniform random play, as frame-stream writes."""
    envs = make_vector_env(PONG.env_id, 4, env_kwargs=PONG.env_kwargs)
    rng = np.random.default_rng(seed)

    class Uniform:
        def act(self, obs, explore):
            return rng.integers(0, 6, size=len(obs)), {}

    worker = RolloutWorker(
        envs, Uniform(), env_seeds(seed, 9, 4), n_step=PONG.n_step, frame_stack=FRAME_STACK
    )
    writes, total = [], 0
    while total < count:
        batch = worker.rollout(128, None, policy_version=0).transitions
        writes.append(batch)
        total += len(batch["reward"])
    envs.close()
    return writes


class LocalLoop:
    """The in-process limit: one LearnerCore sampling an in-process frame table."""

    def __init__(self, config: LearnerConfig, writes: list[dict]) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.core = LearnerCore(PONG.spec, config)
        self.table = ReplayTable(
            sum(len(w["reward"]) for w in writes), frame_stack=FRAME_STACK, seed=0
        )
        for seq, batch in enumerate(writes):
            self.table.write(batch, "bench", seq)

    def run(self, seconds: float) -> tuple[int, float]:
        """Steps for about ``seconds``; returns (steps, elapsed)."""
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            self.core.train([self.core.to_batch(self.table.sample(BATCH))])
            steps += 1
        return steps, time.perf_counter() - start
