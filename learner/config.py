"""Configuration of the learner group."""

from __future__ import annotations

import dataclasses

BACKENDS = ("auto", "gloo", "nccl")
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """DDP learner group and the DQN update rule.

    Attributes:
        world_size: Number of DDP ranks.
        resources_per_rank: Ray resources of one rank's bundle, e.g. ``{"CPU": 1}`` or
            ``{"CPU": 4, "GPU": 1}``; a GPU selects CUDA devices and the nccl backend.
        placement_strategy: Placement group strategy: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD.
        backend: torch.distributed backend: ``auto`` (nccl with GPUs, else gloo), gloo or nccl.
        rendezvous_port: Port for rank 0's store; 0 lets the OS choose (a taken port falls back
            to an OS-chosen one).
        setup_timeout_s: Seconds allowed for placement and rendezvous.
        global_batch_size: Transitions per optimizer step over all ranks; each rank samples
            ``global_batch_size / world_size``.
        hidden_sizes: Hidden layer widths of the Q-network.
        lr: Adam learning rate.
        gamma: Discount factor.
        double_dqn: Select bootstrap actions with the online network.
        max_grad_norm: Clip gradients to this global norm (0 disables clipping).
        target_update_interval: Optimizer steps between target network updates.
        target_update_tau: 1.0 copies the weights (hard update); below 1 averages (soft update).
    """

    # Scaling
    world_size: int = 1
    resources_per_rank: dict = dataclasses.field(default_factory=lambda: {"CPU": 1})
    placement_strategy: str = "PACK"
    backend: str = "auto"
    rendezvous_port: int = 0
    setup_timeout_s: float = 120.0
    # Learning rule
    global_batch_size: int = 64
    hidden_sizes: tuple[int, ...] = (64, 64)
    lr: float = 1e-3
    gamma: float = 0.99
    double_dqn: bool = True
    max_grad_norm: float = 10.0
    target_update_interval: int = 200
    target_update_tau: float = 1.0

    def __post_init__(self) -> None:
        _check(self.world_size >= 1, "world_size", "must be an integer >= 1", self.world_size)
        _check(
            self.global_batch_size >= 1, "global_batch_size", "must be >= 1", self.global_batch_size
        )
        _check(
            self.global_batch_size % self.world_size == 0,
            "global_batch_size",
            f"must be divisible by world_size={self.world_size}",
            self.global_batch_size,
        )
        _check(self.backend in BACKENDS, "backend", f"must be one of {BACKENDS}", self.backend)
        _check(
            self.placement_strategy in STRATEGIES,
            "placement_strategy",
            f"must be one of {STRATEGIES}",
            self.placement_strategy,
        )
        resources = self.resources_per_rank
        _check(
            all(isinstance(v, int | float) and v >= 0 for v in resources.values()),
            "resources_per_rank",
            "must map resource names to non-negative numbers",
            resources,
        )
        gpus = resources.get("GPU", 0)
        _check(
            gpus == int(gpus) and (gpus >= 1 or self.backend != "nccl"),
            "resources_per_rank",
            "GPU must be a whole number, and nccl needs GPU >= 1 per rank",
            resources,
        )
        _check(
            0 <= self.rendezvous_port < 65536,
            "rendezvous_port",
            "must be in [0, 65535]",
            self.rendezvous_port,
        )
        _check(self.setup_timeout_s > 0, "setup_timeout_s", "must be > 0", self.setup_timeout_s)
        _check(
            len(self.hidden_sizes) >= 1 and min(self.hidden_sizes) >= 1,
            "hidden_sizes",
            "must be a non-empty list of positive widths",
            self.hidden_sizes,
        )
        _check(self.lr > 0, "lr", "must be > 0", self.lr)
        _check(0 <= self.gamma <= 1, "gamma", "must be in [0, 1]", self.gamma)
        _check(self.max_grad_norm >= 0, "max_grad_norm", "must be >= 0", self.max_grad_norm)
        _check(
            self.target_update_interval >= 1,
            "target_update_interval",
            "must be >= 1",
            self.target_update_interval,
        )
        _check(
            0 < self.target_update_tau <= 1,
            "target_update_tau",
            "must be in (0, 1]",
            self.target_update_tau,
        )

    @property
    def per_rank_batch_size(self) -> int:
        """Transitions each rank samples per optimizer step."""
        return self.global_batch_size // self.world_size

    @property
    def uses_gpu(self) -> bool:
        """Whether ranks get a GPU each."""
        return self.resources_per_rank.get("GPU", 0) >= 1

    @property
    def resolved_backend(self) -> str:
        """The torch.distributed backend actually used."""
        if self.backend != "auto":
            return self.backend
        return "nccl" if self.uses_gpu else "gloo"


def _check(ok: bool, field: str, rule: str, value) -> None:
    if not ok:
        raise ValueError(f"{field}: {rule}, got {value!r}")
