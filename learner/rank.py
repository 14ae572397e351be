"""The LearnerRank Ray actor: one DDP rank, a thin shell over :class:`learner.core.LearnerCore`."""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Sequence

import numpy as np
import ray
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.receipts import PublishedWeights, StepReceipt
from replay.client import ReplayClient

logger = logging.getLogger(__name__)


class LearnerRank:
    """One rank of the DDP learner group.

    Lifecycle: :meth:`node_address`, then rank 0's :meth:`open_store`, then :meth:`join` on every
    rank at once (the collective rendezvous), then :meth:`step` rounds.

    Args:
        rank: This rank's index.
        generation: The group generation this rank belongs to.
        config: Learner configuration.
        model_spec: Q-network architecture.
        shards: Replay shard handles this rank samples from.
        seed: Run seed (torch and sampling seeds derive from it and the rank).
    """

    def __init__(
        self,
        rank: int,
        generation: int,
        config: LearnerConfig,
        model_spec,
        shards: Sequence[ray.actor.ActorHandle],
        seed: int,
    ) -> None:
        torch.set_num_threads(1)
        self.rank = rank
        self.generation = generation
        self.config = config
        self.model_spec = model_spec
        self.replay = ReplayClient(shards, seed=seed * 1000 + rank)
        self.seed = seed
        self.store: dist.TCPStore | None = None
        self.core: LearnerCore | None = None

    def node_address(self) -> str:
        """This rank's node IP address."""
        return ray.util.get_node_ip_address()

    def open_store(self, address: str, port: int) -> int:
        """Rank 0: starts the rendezvous store and returns its port.

        A ``port`` of 0 lets the OS choose; a taken port falls back to an OS-chosen one.
        """
        timeout = datetime.timedelta(seconds=self.config.setup_timeout_s)
        try:
            self.store = dist.TCPStore(
                address,
                port,
                self.config.world_size,
                is_master=True,
                timeout=timeout,
                wait_for_workers=False,
            )
        except (RuntimeError, dist.DistNetworkError) as err:
            if port == 0:
                raise
            logger.warning(
                "rendezvous port %d unavailable (%s); using an OS-chosen port", port, err
            )
            self.store = dist.TCPStore(
                address,
                0,
                self.config.world_size,
                is_master=True,
                timeout=timeout,
                wait_for_workers=False,
            )
        return self.store.port

    def join(self, address: str, port: int) -> int:
        """Joins the process group and builds the DDP-wrapped learner core; returns the rank."""
        timeout = datetime.timedelta(seconds=self.config.setup_timeout_s)
        if address.startswith("127."):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        if self.store is None:
            self.store = dist.TCPStore(
                address, port, self.config.world_size, is_master=False, timeout=timeout
            )
        dist.init_process_group(
            self.config.resolved_backend,
            store=self.store,
            rank=self.rank,
            world_size=self.config.world_size,
            timeout=timeout,
        )
        device = "cuda:0" if self.config.uses_gpu else "cpu"
        torch.manual_seed(self.seed)  # same initial parameters on every rank
        self.core = LearnerCore(self.model_spec, self.config, device)
        device_ids = [0] if self.config.uses_gpu else None
        self.core.train_module = DistributedDataParallel(
            self.core.loss_module, device_ids=device_ids
        )
        torch.manual_seed(self.seed * 1000 + self.rank)
        return self.rank

    def _allreduce_mean(self, metrics: dict[str, torch.Tensor]) -> dict[str, float]:
        if not metrics:
            return {}
        keys = sorted(metrics)
        stacked = torch.stack([metrics[k].float() for k in keys])
        if self.config.world_size > 1:
            dist.all_reduce(stacked)
            stacked /= self.config.world_size
        return dict(zip(keys, stacked.cpu().tolist(), strict=True))

    def _round(self, round_id: int, batches, sample_s: float, publish: bool) -> StepReceipt:
        start = time.perf_counter()
        metrics = self.core.train(batches)
        reduced = self._allreduce_mean(metrics)
        train_s = time.perf_counter() - start
        published = self.publish() if publish and self.rank == 0 else None
        return StepReceipt(
            generation=self.generation,
            round_id=round_id,
            rank=self.rank,
            optim_steps=len(batches),
            model_version=self.core.version,
            metrics=reduced,
            samples=sum(len(b) for b in batches),
            sample_s=sample_s,
            train_s=train_s,
            published=published,
        )

    def step(self, round_id: int, num_steps: int, publish: bool = True) -> StepReceipt:
        """Runs ``num_steps`` optimizer steps, each on a fresh per-rank sample.

        The round's samples are fetched in one request per shard and split into batches.
        """
        start = time.perf_counter()
        per_rank = self.config.per_rank_batch_size
        arrays = self.replay.sample(per_rank * num_steps)
        batch = self.core.to_batch(arrays)
        batches = [batch[i * per_rank : (i + 1) * per_rank] for i in range(num_steps)]
        return self._round(round_id, batches, time.perf_counter() - start, publish)

    def step_on(self, round_id: int, batches: list[dict[str, np.ndarray]]) -> StepReceipt:
        """Runs one optimizer step per given batch (for equivalence checks and replays)."""
        tensors = [self.core.to_batch(b) for b in batches]
        return self._round(round_id, tensors, 0.0, publish=False)

    def publish(self) -> PublishedWeights:
        """Puts the current policy weights in the object store once and returns the reference."""
        return PublishedWeights(self.generation, self.core.version, ray.put(self.core.weights()))

    def parameters(self) -> dict[str, torch.Tensor]:
        """Copies of the online network's parameters (for checks)."""
        return self.core.weights()

    def shutdown(self) -> None:
        """Leaves the process group."""
        if dist.is_initialized():
            dist.destroy_process_group()
