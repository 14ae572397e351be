"""Configuration of the learner group."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any, TypeVar

from collector.networks.torsos import TORSOS
from learner.algorithms import ALGORITHMS, DEFAULT, OPTION_SECTIONS
from learner.losses import LOSSES
from learner.plugins import STEPPERS as BUILTIN_STEPPERS

BACKENDS = ("auto", "gloo", "nccl")
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
STEPPERS = ("auto", *BUILTIN_STEPPERS)
OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")
GRAD_CLIPS = ("norm", "value", "none")
PRECISIONS = ("fp32", "bf16", "fp16")
LR_SCHEDULERS = ("none", "linear", "cosine")
PIXEL_TORSOS = TORSOS
RECURRENT = ("none", "lstm", "gru")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
_FACTORY_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


_Class = TypeVar("_Class", bound=type)


def _with_option_sections(cls: _Class) -> _Class:
    """Adds a field per registered options section (``learner.<section>``) to ``cls``.

    It runs before the dataclass is made: the sections come from the registrations.
    """
    for name, options in OPTION_SECTIONS.items():
        cls.__annotations__[name] = options
        setattr(cls, name, dataclasses.field(default_factory=options))
    return cls


@dataclasses.dataclass(frozen=True)
@_with_option_sections
class LearnerConfig:
    """DDP learner group, its optimization stepper and the Q-learning update rule.

    Beside the fields below, each options section an algorithm registration declares
    (``learner.algorithms``, e.g. ``onpolicy``) is a field holding that section's frozen
    dataclass, filled from ``learner.<section>`` in YAML.

    Attributes:
        world_size: Number of DDP ranks.
        resources_per_rank: Ray resources of one rank's bundle, e.g. ``{"CPU": 1}`` or
            ``{"CPU": 4, "GPU": 1}``; a GPU selects ``cuda:0`` in each rank (Ray sets
            ``CUDA_VISIBLE_DEVICES``) and the nccl backend.
        placement_strategy: Placement group strategy: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD.
        backend: torch.distributed backend: ``auto`` (nccl with GPUs, else gloo), gloo or nccl.
        rendezvous_port: Port of rank 0's store; 0 lets the OS choose. A taken port falls back
            to OS-chosen ones.
        rendezvous_attempts: Store openings tried before rendezvous fails.
        setup_timeout_s: Seconds allowed for placement and rendezvous.
        command_timeout_s: Seconds a round (and each collective inside it) may take.
        global_batch_size: Transitions per optimizer step over all ranks; each rank samples
            ``global_batch_size / world_size``.
        prefetch: Each rank requests its next round's sample as soon as it has taken the current
            one, so replay works while the rank trains.
        update_priorities: Send ``|priority_key|`` per sampled item back to its replay shard
            (prioritized replay).
        priority_key: Per-item entry of the loss output used as the new priority.
        max_policy_lag: The asynchronous on-policy loop (IMPALA, APPO): rollouts acted by a
            version more than this many versions behind the learner's are dropped, not trained
            on (counted, ``relayrl_rollouts_dropped_total{reason="stale"}``). Other loops
            ignore it.
        hidden_sizes: Hidden layer widths of the policy network (Q-network, actor-critic MLPs,
            SAC's actor).
        network: Your own network instead of the recipe's: a ``"module:function"`` factory
            called as ``factory(observation_space, action_space, config)`` (the env's spaces,
            this ``LearnerConfig``) that returns an ``nn.Module`` fulfilling the algorithm
            family's contract (``collector.networks.contracts``, ``docs/networks.md``); checked
            on a dummy batch before any actor starts. None: the recipe's network.
        loss: A built-in loss, a key of ``learner.losses.LOSSES`` (set by the run's
            ``algorithm``: each registration names its own), or a ``"module:factory"`` path;
            the factory is called as
            ``factory(policy_network, config)`` and returns a module mapping a TensorDict batch
            to a TensorDict with ``loss_*`` entries (TorchRL's LossModule convention).
        loss_options: Free-form options for a user loss factory.
        gamma: Discount factor.
        double_dqn: Select bootstrap actions with the online network.
        dueling: Dueling Q-network heads (value and advantage streams).
        pixel_torso: The convolutional torso of Q-networks over pixel frames (``[S, H, W]``
            uint8 observations, e.g. Atari): ``nature`` (Nature-DQN CNN) or ``impala``
            (IMPALA ResNet); see ``collector.networks.cnn``.
        recurrent: ``none``, ``lstm`` or ``gru``: a recurrent core between the encoder and the
            heads (``collector.networks.recurrent``: state protocol, ``docs/networks.md``).
        recurrent_hidden_size: Units of the recurrent core.
        find_unused_parameters: DDP option for losses whose named methods use a subset of the
            parameters (actor-critic losses).
        stepper: ``auto`` (the built-in loss's own stepper in ``learner.losses.LOSSES``, as its
            registration names it; else ``mixed_precision`` when ``precision`` is not fp32 or
            ``grad_accumulation > 1``, else ``default``), a built-in stepper
            (``learner.plugins.STEPPERS``: ``default``, ``mixed_precision``,
            ``delayed_policy``, ``multi_optimizer``: one optimizer per named loss method) or a
            ``"module:factory"`` path called as ``factory(loss_module, config)``.
        stepper_options: Free-form options of the stepper (``delayed_policy`` reads
            ``policy_delay``, ``critic_method``, ``actor_method``).
        optimizer: adam, adamw, sgd or rmsprop.
        lr: Learning rate.
        weight_decay: Weight decay of the optimizer.
        grad_clip: ``norm`` (global norm ``max_grad_norm``), ``value`` (each gradient to
            ``[-max_grad_value, max_grad_value]``) or ``none``; ``grad_norm`` is always reported.
        max_grad_norm: Global norm limit (0 only measures the norm).
        max_grad_value: Per-element limit for ``grad_clip: value``.
        precision: fp32, bf16 (autocast) or fp16 (autocast and a gradient scaler).
        grad_accumulation: Micro-batches per optimizer step; each rank's batch is split evenly.
        lr_scheduler: none, linear or cosine decay, stepped per optimizer step.
        lr_warmup_steps: Linear warm-up steps from 0 to ``lr``.
        lr_decay_steps: Steps (after warm-up) to decay to ``lr * lr_end_factor``.
        lr_end_factor: Final learning rate as a fraction of ``lr``.
        target_update_interval: Optimizer steps between target network updates.
        target_update_tau: 1.0 copies the weights (hard update); below 1 averages (soft update).
        compile: ``off`` or a ``torch.compile`` mode (``default``, ``reduce-overhead``,
            ``max-autotune``, ``max-autotune-no-cudagraphs``) for the policy network each rank
            trains; ``state_dict`` keys, published weights and checkpoints are unchanged (see
            ``learner.compilation``). The first round of a rank pays the compile time.
        compile_backend: ``inductor`` (generated kernels; reads the mode), ``aot_eager`` or
            ``eager`` (tracing only, for CI and debugging).
    """

    # Scaling and placement
    world_size: int = 1
    resources_per_rank: dict = dataclasses.field(default_factory=lambda: {"CPU": 1})
    placement_strategy: str = "PACK"
    backend: str = "auto"
    rendezvous_port: int = 0
    rendezvous_attempts: int = 3
    setup_timeout_s: float = 120.0
    command_timeout_s: float = 600.0
    # Sampling
    global_batch_size: int = 64
    prefetch: bool = True
    update_priorities: bool = False
    priority_key: str = "td_error"
    max_policy_lag: int = 16
    # Model and loss
    hidden_sizes: tuple[int, ...] = (128, 128)
    network: str | None = None
    loss: str = ALGORITHMS[DEFAULT].loss
    loss_options: dict = dataclasses.field(default_factory=dict)
    gamma: float = 0.99
    double_dqn: bool = True
    dueling: bool = False
    pixel_torso: str = "nature"
    recurrent: str = "none"
    recurrent_hidden_size: int = 128
    find_unused_parameters: bool = False
    # Optimization
    stepper: str = "auto"
    stepper_options: dict = dataclasses.field(default_factory=dict)
    optimizer: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    grad_clip: str = "norm"
    max_grad_norm: float = 10.0
    max_grad_value: float = 1.0
    precision: str = "fp32"
    grad_accumulation: int = 1
    lr_scheduler: str = "none"
    lr_warmup_steps: int = 0
    lr_decay_steps: int = 0
    lr_end_factor: float = 0.0
    # Target network
    target_update_interval: int = 1
    target_update_tau: float = 0.005
    # Compilation
    compile: str = "off"
    compile_backend: str = "inductor"

    def __post_init__(self) -> None:
        self._check_scaling()
        self._check_learning_rule()
        self._check_optimization()
        self._check_compile()

    def _check_scaling(self) -> None:
        _check(self.world_size >= 1, "world_size", "must be an integer >= 1", self.world_size)
        _check(self.backend in BACKENDS, "backend", f"must be one of {BACKENDS}", self.backend)
        _one_of(self.placement_strategy, "placement_strategy", STRATEGIES)
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
            "GPU must be a whole number (fractional GPUs cannot run nccl), and nccl needs "
            "GPU >= 1 per rank",
            resources,
        )
        _check(
            0 <= self.rendezvous_port < 65536,
            "rendezvous_port",
            "must be in [0, 65535]",
            self.rendezvous_port,
        )
        _check(
            self.rendezvous_attempts >= 1,
            "rendezvous_attempts",
            "must be >= 1",
            self.rendezvous_attempts,
        )
        _check(self.setup_timeout_s > 0, "setup_timeout_s", "must be > 0", self.setup_timeout_s)
        _check(
            self.command_timeout_s > 0, "command_timeout_s", "must be > 0", self.command_timeout_s
        )
        _check(
            self.global_batch_size >= 1, "global_batch_size", "must be >= 1", self.global_batch_size
        )
        _check(
            self.global_batch_size % self.world_size == 0,
            "global_batch_size",
            f"must be divisible by world_size={self.world_size}",
            self.global_batch_size,
        )

    def _check_learning_rule(self) -> None:
        _check(
            len(self.hidden_sizes) >= 1 and min(self.hidden_sizes) >= 1,
            "hidden_sizes",
            "must be a non-empty list of positive widths",
            self.hidden_sizes,
        )
        _check(
            self.loss in LOSSES or bool(_FACTORY_PATH.match(self.loss)),
            "loss",
            f"must be one of {tuple(LOSSES)} or a 'module:factory' path",
            self.loss,
        )
        _check(
            self.network is None or bool(_FACTORY_PATH.match(self.network)),
            "network",
            "must be a 'module:function' factory path or null",
            self.network,
        )
        _one_of(self.pixel_torso, "pixel_torso", PIXEL_TORSOS)
        _one_of(self.recurrent, "recurrent", RECURRENT)
        _check(
            self.recurrent_hidden_size >= 1,
            "recurrent_hidden_size",
            "must be >= 1",
            self.recurrent_hidden_size,
        )
        if self.loss.startswith("torchrl:"):
            from learner.losses.torchrl_loss import check_torchrl_loss  # imports torchrl

            check_torchrl_loss(self.loss)
        _check(bool(self.priority_key), "priority_key", "must be non-empty", self.priority_key)
        _check(0 <= self.gamma <= 1, "gamma", "must be in [0, 1]", self.gamma)
        _check(self.max_policy_lag >= 0, "max_policy_lag", "must be >= 0", self.max_policy_lag)
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

    def _check_optimization(self) -> None:
        _check(
            self.stepper in STEPPERS or bool(_FACTORY_PATH.match(self.stepper)),
            "stepper",
            f"must be one of {STEPPERS} or a 'module:factory' path",
            self.stepper,
        )
        _one_of(self.optimizer, "optimizer", OPTIMIZERS)
        _check(self.lr > 0, "lr", "must be > 0", self.lr)
        _check(self.weight_decay >= 0, "weight_decay", "must be >= 0", self.weight_decay)
        _one_of(self.grad_clip, "grad_clip", GRAD_CLIPS)
        _check(self.max_grad_norm >= 0, "max_grad_norm", "must be >= 0", self.max_grad_norm)
        _check(self.max_grad_value > 0, "max_grad_value", "must be > 0", self.max_grad_value)
        _one_of(self.precision, "precision", PRECISIONS)
        _check(
            self.grad_accumulation >= 1,
            "grad_accumulation",
            "must be >= 1",
            self.grad_accumulation,
        )
        _check(
            self.per_rank_batch_size % self.grad_accumulation == 0,
            "grad_accumulation",
            f"must divide the per-rank batch size {self.per_rank_batch_size}",
            self.grad_accumulation,
        )
        _check(
            self.stepper not in BUILTIN_STEPPERS
            or not BUILTIN_STEPPERS[self.stepper].fp32_only
            or (self.precision == "fp32" and self.grad_accumulation == 1),
            "stepper",
            f"{self.stepper!r} runs fp32 without accumulation; use 'mixed_precision' or 'auto' for "
            f"precision={self.precision!r}, grad_accumulation={self.grad_accumulation}",
            self.stepper,
        )
        _one_of(self.lr_scheduler, "lr_scheduler", LR_SCHEDULERS)
        _check(self.lr_warmup_steps >= 0, "lr_warmup_steps", "must be >= 0", self.lr_warmup_steps)
        _check(
            self.lr_decay_steps >= 1 or self.lr_scheduler == "none",
            "lr_decay_steps",
            f"must be >= 1 with lr_scheduler={self.lr_scheduler!r}",
            self.lr_decay_steps,
        )
        _check(
            0 <= self.lr_end_factor <= 1, "lr_end_factor", "must be in [0, 1]", self.lr_end_factor
        )

    def _check_compile(self) -> None:
        _one_of(self.compile, "compile", COMPILE_MODES)
        _one_of(self.compile_backend, "compile_backend", COMPILE_BACKENDS)
        if self.compile != "off":
            from learner.compilation import compile_unsupported_reason  # imports torch

            reason = compile_unsupported_reason()
            _check(reason is None, "compile", f"needs torch.compile: {reason}", self.compile)

    if TYPE_CHECKING:  # the registered options sections, added at import; typed by their owners

        def __getattr__(self, name: str) -> Any: ...

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

    @property
    def resolved_stepper(self) -> str:
        """The stepper actually used (``auto`` resolved)."""
        if self.stepper != "auto":
            return self.stepper
        builtin = LOSSES.get(self.loss)
        if builtin is not None and builtin.stepper is not None:
            return builtin.stepper
        plain = self.precision == "fp32" and self.grad_accumulation == 1
        return "default" if plain else "mixed_precision"


def _check(ok: bool, field: str, rule: str, value) -> None:
    if not ok:
        raise ValueError(f"{field}: {rule}, got {value!r}")


def _one_of(value, field: str, choices: tuple) -> None:
    _check(value in choices, field, f"must be one of {choices}", value)
