"""The LearnerRank Ray actor: one DDP rank, a thin shell over :class:`learner.core.LearnerCore`."""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import ray
import torch
import torch.distributed as dist

from learner.config import LearnerConfig
from learner.determinism import deterministic_kernels, state_digest
from learner.plugins import STEPPERS
from learner.ranks.collectives import allreduce, allreduce_counts, allreduce_mean
from learner.ranks.rendezvous import open_store
from learner.receipts import StaleGenerationError, StepReceipt
from learner.weights import Schema, tensor_schema
from replay.client import ReplayClient
from replay.sampling.streams import stream_seed

if TYPE_CHECKING:  # loaded by join(), in the rank's process: the driver imports this class
    from learner.core import LearnerCore  # (tensordict, and torch._dynamo through it)
    from learner.ranks.sampling import EpochPlan, Passes, RankSampler

logger = logging.getLogger(__name__)


class LearnerRank:
    """One rank of the DDP learner group.

    Lifecycle: :meth:`node_address`, then rank 0's :meth:`open_store`, then :meth:`join` on every
    rank at once (the collective rendezvous), then :meth:`step` rounds. Every command carrying a
    generation is refused unless it is this rank's.

    With one rank the loss is not wrapped in DDP (the step is the same without the all-reduce).
    With ``config.compile`` the core compiles its policy network in place before DDP wraps the
    loss around it (the ``state_dict`` keys are unchanged; see :mod:`learner.compilation`).

    Args:
        rank: This rank's index.
        generation: The group generation this rank belongs to.
        config: Learner configuration.
        model_spec: Policy network architecture.
        shards: Replay shard handles this rank samples from.
        seed: Run seed (torch and sampling seeds derive from it and the rank).

    Keyword Args:
        loss_factory: Overrides ``config.loss`` (``factory(policy_network, config)``).
        stepper_factory: Overrides ``config.stepper`` (``factory(loss_module, config)``).
        deterministic: ``run.deterministic``: deterministic kernels
            (``learner.determinism``), seeds from ``replay.sampling.streams`` (``init`` for the
            network, ``shuffle`` per rank), no prefetch, every round's sample drawn after the
            driver's commit from streams named ``(rank, version)``, and every priority update
            staged in the shards before the round's receipt.
    """

    core: LearnerCore  # built by join()
    sampler: RankSampler  # built by join()

    def __init__(
        self,
        rank: int,
        generation: int,
        config: LearnerConfig,
        model_spec,
        shards: Sequence[ray.actor.ActorHandle],
        seed: int,
        *,
        loss_factory=None,
        stepper_factory=None,
        deterministic: bool = False,
    ) -> None:
        torch.set_num_threads(1)
        torch.set_flush_denormal(True)  # denormals slowed Pong's CNN rounds 2.4 -> 3.3 s
        self.deterministic = deterministic
        self.rank = rank
        self.generation = generation
        self.config = config
        self.model_spec = model_spec
        self.factories = {"loss_factory": loss_factory, "stepper_factory": stepper_factory}
        replay_seed = stream_seed(seed, "shuffle", rank) if deterministic else seed * 1000 + rank
        self.replay = ReplayClient(shards, seed=replay_seed)
        self.seed = seed
        self.store: dist.TCPStore | None = None
        self.device = "cpu"
        self._warned_priorities = False

    # -- setup -------------------------------------------------------------------------------
    def node_address(self) -> str:
        """This rank's node IP address."""
        return ray.util.get_node_ip_address()

    def pid(self) -> int:
        """This rank's worker process id (what an operator would signal)."""
        return os.getpid()

    def open_store(self, address: str, port: int) -> int:
        """Rank 0: starts the rendezvous store and returns its port (see ``open_store``)."""
        self.store = open_store(
            address,
            port,
            self.config.world_size,
            timeout_s=self.config.setup_timeout_s,
            attempts=self.config.rendezvous_attempts,
        )
        return self.store.port

    def join(self, address: str, port: int) -> int:
        """Joins the process group and builds the DDP-wrapped learner core; returns the rank."""
        from torch.nn.parallel import DistributedDataParallel

        from learner.core import LearnerCore
        from learner.ranks.sampling import RankSampler

        config = self.config
        if address.startswith("127."):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        if self.store is None:
            self.store = dist.TCPStore(
                address,
                port,
                config.world_size,
                is_master=False,
                timeout=datetime.timedelta(seconds=config.setup_timeout_s),
            )
        if config.uses_gpu:
            torch.cuda.set_device(0)  # Ray's CUDA_VISIBLE_DEVICES maps this rank's GPU to 0
            self.device = "cuda:0"
        if self.deterministic:  # before the first kernel (cuBLAS reads its workspace once)
            deterministic_kernels(self.device)
        dist.init_process_group(
            config.resolved_backend,
            store=self.store,
            rank=self.rank,
            world_size=config.world_size,
            timeout=datetime.timedelta(seconds=config.command_timeout_s),
        )
        # The same initial parameters on every rank.
        torch.manual_seed(stream_seed(self.seed, "init", 0) if self.deterministic else self.seed)
        self.core = LearnerCore(self.model_spec, config, self.device, **self.factories)
        if config.world_size > 1:
            find_unused = (
                config.find_unused_parameters
                or getattr(STEPPERS.get(config.resolved_stepper), "partial_parameters", False)
                or getattr(self.core.loss_module, "find_unused_parameters", False)
            )
            self.core.train_module = DistributedDataParallel(
                self.core.train_module,
                device_ids=[0] if config.uses_gpu else None,
                find_unused_parameters=find_unused,
            )
        if self.deterministic:
            torch.manual_seed(stream_seed(self.seed, "shuffle", self.rank, key=(1,)))
        else:
            torch.manual_seed(self.seed * 1000 + self.rank)
        prefetch = config.prefetch and not self.deterministic
        steps = config.vtrace.minibatch_unit == "steps"  # checked: APPO's own loss
        self.sampler = RankSampler(
            self.replay,
            config.per_rank_batch_size,
            self.core.to_batch,
            prefetch=prefetch,
            prepare_pass=getattr(self.core.loss_module, "prepare_pass", None) if steps else None,
        )
        return self.rank

    def describe(self) -> dict:
        """Rank, generation, device, backend, world size, DDP, compile and version (for checks)."""
        core = getattr(self, "core", None)
        return {
            "rank": self.rank,
            "generation": self.generation,
            "world_size": self.config.world_size,
            "backend": dist.get_backend() if dist.is_initialized() else None,
            "device": str(core.device) if core else self.device,
            "ddp": type(getattr(core, "train_module", None)).__name__ == "DistributedDataParallel",
            "compiled": bool(core and core.compiled),
            "version": core.version if core else None,
            "deterministic": self.deterministic,
        }

    # -- rounds ------------------------------------------------------------------------------
    def _check_generation(self, generation: int | None) -> None:
        if generation is not None and generation != self.generation:
            raise StaleGenerationError(
                f"rank {self.rank} of generation {self.generation} refuses a command for "
                f"generation {generation}"
            )

    def _round(
        self,
        round_id: int,
        batches,
        sample_s: float,
        publish: bool,
        extra: dict[str, float] | None = None,
        sums: dict[str, float] | None = None,
        lags: np.ndarray | None = None,
    ) -> tuple[StepReceipt, dict[str, torch.Tensor] | None]:
        start = time.perf_counter()
        metrics = self.core.train(batches)
        world, device = self.config.world_size, self.core.device
        reduced = allreduce_mean(metrics, world)
        if extra:
            reduced.update(allreduce(extra, "max", world, device))
        if sums:
            reduced.update(allreduce(sums, "sum", world, device))
        lag_counts = () if lags is None else allreduce_counts(lags, world, device)
        if self.config.update_priorities:
            self._push_priorities()
            if self.deterministic:  # staged in the shards before the driver's next commit
                self.flush_replay()
        trained = time.perf_counter()
        weights = self.core.weights() if publish and self.rank == 0 else None
        receipt = StepReceipt(
            generation=self.generation,
            round_id=round_id,
            rank=self.rank,
            optim_steps=len(batches),
            model_version=self.core.version,
            metrics=reduced,
            samples=getattr(batches, "samples", None) or sum(len(b) for b in batches),
            sample_s=sample_s,
            train_s=trained - start,
            publish_s=time.perf_counter() - trained,
            finished_at=time.time(),
            lags=lag_counts,
        )
        return receipt, weights

    def _push_priorities(self) -> None:
        """Hands the round's items' ``|priority_key|`` to the replay client (fire and forget).

        ``ReplayClient.update_priorities(keys, priority)`` routes each update to its shard,
        keyed by ``(shard, index, insertion_id)``, so an overwritten item's update is dropped.
        """
        taken = self.core.take_priorities()
        update = getattr(self.replay, "update_priorities", None)
        if taken is None:
            return
        if update is None:
            if not self._warned_priorities:
                logger.warning("update_priorities is set but the replay client cannot update")
                self._warned_priorities = True
            return
        update(*taken)

    def flush_replay(self) -> None:
        """Waits until this rank's priority updates are applied by the shards."""
        flush = getattr(self.replay, "flush_updates", None)
        if flush is not None:
            flush(wait=True)

    @ray.method(num_returns=2)
    def step(
        self,
        round_id: int,
        num_steps: int,
        publish: bool = True,
        generation: int | None = None,
        beta: float | None = None,
        epochs: EpochPlan | None = None,
    ) -> tuple[StepReceipt, dict[str, torch.Tensor] | None]:
        """Runs ``num_steps`` optimizer steps, each on a fresh per-rank sample.

        The round's samples come in one request per shard (prefetched during the previous
        round when ``config.prefetch``) and are split into batches. An on-policy round
        (``epochs``) instead takes this rank's share of the batch the collectors just wrote
        (``epochs.items``, never prefetched) and trains ``epochs.epochs`` passes over it in
        ``epochs.minibatches`` shuffled minibatches; its metrics report ``policy_lag_max``,
        the largest ``version - policy_version`` of the items (0 in lockstep).

        Returns:
            Two object refs (``num_returns=2``): the receipt, and the policy weights after the
            round (CPU copies) when ``publish`` on rank 0, else None. The weights are this
            task's return value: stored once, owned by the caller.
        """
        self._check_generation(generation)
        if beta is not None:  # importance-weight exponent annealed by the driver
            self.replay.beta = beta
        start = time.perf_counter()
        if self.deterministic:  # the shards as the driver's last commit left them
            self.replay.refresh()
            self.replay.set_stream((self.rank, self.core.version))
        if epochs is not None:
            sums, lag, lags = None, 0.0, None
            batches: list | Passes
            if epochs.max_policy_lag is None:
                batches, lag = self._take_epochs(epochs)
            else:  # the asynchronous loop's queue
                version, timeout = self.core.version, self.config.command_timeout_s
                batches, sums, lags = self.sampler.take_queue(epochs, version, timeout_s=timeout)
                lag = sums.pop("policy_lag")
            if len(batches) != num_steps:
                raise ValueError(f"epochs {epochs} make {len(batches)} steps, not {num_steps}")
            elapsed = time.perf_counter() - start
            extra = {"policy_lag": lag}
            return self._round(round_id, batches, elapsed, publish, extra, sums, lags)
        batches = self.sampler.take(num_steps)
        reply = self._round(round_id, batches, time.perf_counter() - start, publish)
        self.sampler.prepare_next()
        return reply

    def _take_epochs(self, plan: EpochPlan) -> tuple[list, int]:
        """Takes this rank's share of the FIFO batch; deterministic runs take turns by rank.

        FIFO tables hand their items to requests in arrival order, so in a deterministic run
        rank 0 takes its share first, then rank 1, and so on (a barrier between turns).
        """
        if not self.deterministic or self.config.world_size == 1:
            return self.sampler.take_epochs(plan, self.core.version)
        taken: tuple[list, int] = ([], 0)
        for turn in range(self.config.world_size):
            if turn == self.rank:
                self.replay.refresh()  # the tables as the ranks before this one left them
                taken = self.sampler.take_epochs(plan, self.core.version)
            dist.barrier()
        return taken

    def digest(self) -> str:
        """SHA-256 of this rank's parameters, optimizer state and version (``state_digest``)."""
        self.sampler.drain()
        return state_digest(self.core.state_dict())

    def step_on(
        self, round_id: int, batches: list[dict[str, np.ndarray]], generation: int | None = None
    ) -> StepReceipt:
        """Runs one optimizer step per given batch (for equivalence checks and replays)."""
        self._check_generation(generation)
        tensors = [self.core.to_batch(b) for b in batches]
        receipt, _ = self._round(round_id, tensors, 0.0, publish=False)
        return receipt

    # -- weights and state -------------------------------------------------------------------
    @ray.method(num_returns=2)
    def publish(self, generation: int | None = None) -> tuple[int, dict[str, torch.Tensor]]:
        """Returns two refs: the model version and the policy weights (CPU copies)."""
        self._check_generation(generation)
        return self.core.version, self.core.weights()

    def weights_schema(self) -> Schema:
        """Names, shapes and dtypes of the published weights."""
        return tensor_schema(self.core.policy_network.state_dict())

    def parameters(self) -> dict[str, torch.Tensor]:
        """Copies of the policy network's parameters (for checks)."""
        return self.core.weights()

    def state_dict(self) -> dict:
        """The core's state plus this rank's identity and replay RNG (``weights_only`` safe)."""
        self.sampler.drain()
        state = self.core.state_dict()
        state["rng"]["replay"] = self.replay.rng.bit_generator.state
        state["meta"] = {
            "rank": self.rank,
            "world_size": self.config.world_size,
            "generation": self.generation,
            "loss": self.config.loss,
            "stepper": self.config.resolved_stepper,
        }
        return state

    def load_state_dict(self, state: dict) -> int:
        """Restores :meth:`state_dict` of the same rank; returns the restored version.

        Raises:
            ValueError: If the state belongs to another rank or world size (``resize``).
        """
        meta = state.get("meta", {})
        if meta.get("world_size") != self.config.world_size or meta.get("rank") != self.rank:
            raise ValueError(
                f"learner state of rank {meta.get('rank')} of world_size "
                f"{meta.get('world_size')} cannot be restored into rank {self.rank} of "
                f"world_size {self.config.world_size}"
            )
        self.sampler.reset()
        self.core.load_state_dict(state)
        if "replay" in state["rng"]:
            self.replay.rng.bit_generator.state = state["rng"]["replay"]
        return self.core.version

    def set_shards(self, shards: Sequence[ray.actor.ActorHandle | str]) -> int:
        """Switches the replay client to ``shards`` (handles or actor names) between rounds.

        Drains and resets the sampler, flushes held priority updates to the old shards and
        drops prefetched batches first. Returns the number of shards.
        """
        handles = [ray.get_actor(s) if isinstance(s, str) else s for s in shards]
        self.sampler.reset()
        self.flush_replay()
        self.replay.cancel_prefetch()
        self.replay.set_shards(handles)
        return len(handles)

    def shutdown(self) -> None:
        """Stops background sampling and leaves the process group."""
        if hasattr(self, "sampler"):
            self.sampler.close()
        if dist.is_initialized():
            dist.destroy_process_group()
