"""The Collector Ray actor: a thin shell over :class:`collector.rollout.RolloutWorker`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

import numpy as np
import ray
import torch

from collector.env import env_seeds, make_vector_env
from collector.policy import EpsilonGreedy, ModelSpec
from collector.receipts import RolloutReceipt
from collector.rollout import RolloutWorker
from replay.client import ReplayClient


class Collector:
    """Steps ``num_envs`` environments with the newest weights it was given and writes to replay.

    Each instance is one writer of the replay service. Its writer id carries an incarnation
    token, so a restarted collector (whose sequence numbers start again at 0) is never mistaken
    for a retry of its predecessor.

    Args:
        collector_id: Index of this collector; writes go to shard ``collector_id % num_shards``.
        env_id: Gymnasium id of the environment.
        num_envs: Sub-environments stepped in one vector env.
        model_spec: Architecture of the Q-network (shared with the learners).
        shards: Handles of the replay shards.
        seed: Run seed; env and exploration seeds are derived from it and ``collector_id``.
        vector_mode: ``"sync"`` or ``"async"``.
    """

    def __init__(
        self,
        collector_id: int,
        env_id: str,
        num_envs: int,
        model_spec: ModelSpec,
        shards: Sequence[ray.actor.ActorHandle],
        seed: int,
        vector_mode: str = "sync",
    ) -> None:
        torch.set_num_threads(1)
        self.collector_id = collector_id
        self.writer_id = f"collector-{collector_id}/{uuid.uuid4().hex[:8]}"
        self.replay = ReplayClient(shards)
        torch.manual_seed(seed * 7919 + collector_id)
        self.q_network = model_spec.build().eval()
        rng = np.random.default_rng(np.random.SeedSequence([seed, collector_id, 1]))
        policy = EpsilonGreedy(self.q_network, model_spec.num_actions, rng)
        envs = make_vector_env(env_id, num_envs, mode=vector_mode)
        self.worker = RolloutWorker(envs, policy, env_seeds(seed, collector_id, num_envs))
        self.seq = 0
        self.generation = -1
        self.version = -1

    def policy_version(self) -> tuple[int, int]:
        """``(generation, version)`` of the weights in use; ``(-1, -1)`` before any."""
        return self.generation, self.version

    def set_weights(self, weights) -> bool:
        """Applies published weights if newer than the ones in use; returns whether it did.

        Args:
            weights: A ``learner.PublishedWeights`` (generation, version, state dict reference).
        """
        if (weights.generation, weights.version) <= (self.generation, self.version):
            return False
        self.q_network.load_state_dict(ray.get(weights.ref))
        self.generation, self.version = weights.generation, weights.version
        return True

    def rollout(self, frames: int, epsilon: float, weights=None) -> RolloutReceipt:
        """Collects about ``frames`` transitions, writes them to replay and reports.

        Args:
            frames: Frame budget of this rollout: ``frames // num_envs`` vector steps (at least
                one) are taken, and steps that only auto-reset an env are not written.
            epsilon: Exploration rate set by the driver.
            weights: Optional newer ``PublishedWeights`` to apply before stepping.
        """
        if weights is not None:
            self.set_weights(weights)
        start = time.perf_counter()
        steps = max(1, frames // self.worker.num_envs)
        batch = self.worker.rollout(steps, epsilon, self.version)
        stepped = time.perf_counter()
        write = self.replay.write(
            batch.transitions, self.writer_id, self.seq, shard=self.collector_id
        )
        done = time.perf_counter()
        receipt = RolloutReceipt(
            collector_id=self.collector_id,
            seq=self.seq,
            frames=batch.frames,
            episode_returns=tuple(batch.episode_returns),
            episode_lengths=tuple(batch.episode_lengths),
            policy_generation=self.generation,
            policy_version=self.version,
            writes=(write,),
            rollout_s=stepped - start,
            write_s=done - stepped,
        )
        self.seq += 1
        return receipt

    def ping(self) -> int:
        """Liveness probe; returns the collector id."""
        return self.collector_id
