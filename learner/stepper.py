"""Optimization steppers: one optimizer step from a loss module and a batch.

A stepper owns its optimizers (and learning-rate scheduler) and implements :class:`Stepper`.
Built-in ones: :class:`DefaultStepper` (here), ``MixedPrecisionStepper``
(:mod:`learner.precision`) and the TD3-style ``DelayedPolicyStepper`` (:mod:`learner.delayed`).
A user stepper is named by ``LearnerConfig.stepper = "module:factory"`` and built as
``factory(loss_module, config)``; it calls the loss through ``train_module`` (the DDP-wrapped
:class:`learner.loss.LossDispatch`, which returns the loss output as a dict of tensors), never
through ``loss_module`` directly, so gradients are averaged over ranks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

import torch
from tensordict import TensorDict
from torch import nn

logger = logging.getLogger(__name__)


@runtime_checkable
class Stepper(Protocol):
    """What a rank asks of an optimization stepper.

    Examples:
        >>> class SGDStepper:
        ...     def __init__(self, loss_module, config):
        ...         params = [p for p in loss_module.parameters() if p.requires_grad]
        ...         self.optimizer = torch.optim.SGD(params, lr=config.lr)
        ...
        ...     def step(self, train_module, batch):
        ...         losses = train_module(batch)
        ...         self.optimizer.zero_grad()
        ...         total_loss(losses).backward()
        ...         self.optimizer.step()
        ...         return {k: v.detach() for k, v in losses.items()}
        ...
        ...     def state_dict(self):
        ...         return {"optimizer": self.optimizer.state_dict()}
        ...
        ...     def load_state_dict(self, state):
        ...         self.optimizer.load_state_dict(state["optimizer"])
    """

    def step(self, train_module: nn.Module, batch: TensorDict) -> dict[str, torch.Tensor]:
        """Runs one optimizer step; returns detached metrics (0-d) and per-item entries (1-d)."""
        ...

    def state_dict(self) -> dict:
        """Tensors and plain values only (loadable with ``torch.load(weights_only=True)``)."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`."""
        ...


def total_loss(losses: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Sum of the ``loss_*`` entries (TorchRL's LossModule convention)."""
    terms = [v for k, v in losses.items() if k.startswith("loss_")]
    if not terms:
        raise ValueError(f"the loss module returned no loss_* entry (keys: {list(losses.keys())})")
    return torch.stack(terms).sum() if len(terms) > 1 else terms[0]


def detached(losses: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The loss output as a dict of detached tensors."""
    return {k: v.detach() for k, v in losses.items()}


def trainable(module: nn.Module) -> list[nn.Parameter]:
    """Parameters that require gradients."""
    return [p for p in module.parameters() if p.requires_grad]


def make_optimizer(parameters: Iterable[nn.Parameter], config) -> torch.optim.Optimizer:
    """The optimizer named by ``config.optimizer`` with ``lr`` and ``weight_decay``.

    Adam, AdamW and SGD use torch's fused kernels (on CPU too: much faster steps for small
    networks than the per-tensor loop, see ``docs/benchmarks.md``), falling back where a device
    has none.
    """
    params = list(parameters)
    kinds = {
        "adam": torch.optim.Adam,
        "adamw": torch.optim.AdamW,
        "sgd": torch.optim.SGD,
        "rmsprop": torch.optim.RMSprop,
    }
    kind = kinds[config.optimizer]
    options = {"lr": config.lr, "weight_decay": config.weight_decay}
    if config.optimizer != "rmsprop":
        try:
            return kind(params, fused=True, **options)
        except (RuntimeError, TypeError, ValueError):
            pass
    return kind(params, **options)


def make_scheduler(
    optimizer: torch.optim.Optimizer, config
) -> torch.optim.lr_scheduler.LambdaLR | None:
    """Warm-up then linear or cosine decay per optimizer step, or None (``lr_scheduler: none``)."""
    if config.lr_scheduler == "none":
        return None
    warmup, decay, end = config.lr_warmup_steps, config.lr_decay_steps, config.lr_end_factor
    cosine = config.lr_scheduler == "cosine"

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min((step - warmup) / decay, 1.0)
        if cosine:
            return end + (1 - end) * 0.5 * (1 + math.cos(math.pi * progress))
        return 1 - (1 - end) * progress

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def configured_hyperparameters(optimizer: torch.optim.Optimizer) -> list[dict[str, float]]:
    """Each param group's configured ``lr`` (before any schedule) and ``weight_decay``."""
    return [
        {"lr": group.get("initial_lr", group["lr"]), "weight_decay": group["weight_decay"]}
        for group in optimizer.param_groups
    ]


def reapply_hyperparameters(
    optimizer: torch.optim.Optimizer,
    configured: list[dict[str, float]],
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> None:
    """After a restore, the config's learning rate and weight decay win over the saved ones.

    ``optimizer.load_state_dict`` brings back the saved param groups, ``lr`` included, so a run
    resumed with another ``learner.lr`` (a PBT exploit, or ``--resume --set learner.lr=...``)
    would go on at the old one. Here each group gets its configured values back; under a
    schedule the saved progress is kept: the new base times the saved ``lr / initial_lr``.

    Examples:
        >>> net = torch.nn.Linear(2, 1)
        >>> saved = torch.optim.Adam(net.parameters(), lr=1e-3).state_dict()
        >>> optimizer = torch.optim.Adam(net.parameters(), lr=5e-4)
        >>> configured = configured_hyperparameters(optimizer)
        >>> optimizer.load_state_dict(saved)
        >>> reapply_hyperparameters(optimizer, configured)
        >>> optimizer.param_groups[0]["lr"]
        0.0005
    """
    for group, wanted in zip(optimizer.param_groups, configured, strict=True):
        group["weight_decay"] = wanted["weight_decay"]
        base = group.get("initial_lr") if scheduler is not None else group["lr"]
        if base == wanted["lr"]:
            continue  # unchanged: the saved lr stays bit for bit (deterministic resumes)
        if scheduler is not None and base:
            group["lr"] = wanted["lr"] * (group["lr"] / base)
            group["initial_lr"] = wanted["lr"]
        else:
            group["lr"] = wanted["lr"]
    if scheduler is not None:
        scheduler.base_lrs = [wanted["lr"] for wanted in configured]


class GradClipper:
    """Clips gradients by global norm or by value and measures the global norm.

    Args:
        parameters: Parameters whose gradients are clipped.
        mode: ``norm``, ``value`` or ``none``.
        max_norm: Global norm limit for ``norm`` (0 only measures).
        max_value: Per-element limit for ``value``.
    """

    def __init__(
        self, parameters: list[nn.Parameter], mode: str, max_norm: float, max_value: float
    ) -> None:
        self.parameters = parameters
        self.mode = mode
        self.max_norm = max_norm
        self.max_value = max_value
        # The per-tensor loop beats foreach kernels for small CPU networks.
        on_cpu = all(p.device.type == "cpu" for p in parameters)
        self.foreach = False if on_cpu else None

    def __call__(self) -> torch.Tensor:
        """Clips in place; returns the global gradient norm before clipping."""
        if self.mode == "norm" and self.max_norm > 0:
            return torch.nn.utils.clip_grad_norm_(
                self.parameters, self.max_norm, foreach=self.foreach
            )
        grads = [p.grad for p in self.parameters if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, foreach=self.foreach)
        if self.mode == "value":
            torch.nn.utils.clip_grad_value_(self.parameters, self.max_value, foreach=self.foreach)
        return norm


class DefaultStepper:
    """Zero grads, backward of the summed losses, clip, optimizer step, scheduler step.

    Reports the loss output (detached), ``grad_norm`` (before clipping), ``nonfinite_skipped``
    and ``lr`` when a scheduler is set. A non-finite loss or gradient norm skips the optimizer
    and scheduler steps (``nonfinite_skipped`` 1, :attr:`skipped_steps` counts them).

    Args:
        optimizer: The optimizer over the trainable parameters.

    Keyword Args:
        grad_clip: ``norm``, ``value`` or ``none``.
        max_grad_norm: Global norm limit (0 only measures the norm).
        max_grad_value: Per-element limit for ``grad_clip="value"``.
        scheduler: Optional learning-rate scheduler stepped after each optimizer step.

    Examples:
        >>> stepper = DefaultStepper.from_config(loss_module, LearnerConfig())  # doctest: +SKIP
        >>> metrics = stepper.step(LossDispatch(loss_module), batch)  # doctest: +SKIP
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        grad_clip: str = "norm",
        max_grad_norm: float = 10.0,
        max_grad_value: float = 1.0,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.configured = configured_hyperparameters(optimizer)  # re-applied after a restore
        self.parameters = [p for group in optimizer.param_groups for p in group["params"]]
        self.clip = GradClipper(self.parameters, grad_clip, max_grad_norm, max_grad_value)
        self.skipped_steps = 0  # steps skipped by the non-finite guard

    @classmethod
    def from_config(cls, loss_module: nn.Module, config) -> DefaultStepper:
        """Builds the optimizer over the loss module's trainable parameters from ``config``."""
        optimizer = make_optimizer(trainable(loss_module), config)
        return cls(
            optimizer,
            grad_clip=config.grad_clip,
            max_grad_norm=config.max_grad_norm,
            max_grad_value=config.max_grad_value,
            scheduler=make_scheduler(optimizer, config),
        )

    def step(self, train_module: nn.Module, batch: TensorDict) -> dict[str, torch.Tensor]:
        """Runs one optimizer step and returns its metrics as detached tensors."""
        losses = train_module(batch)
        loss = total_loss(losses)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = self.clip()
        # Gradients are all-reduced by now, so every rank takes the same decision.
        finite = bool(torch.isfinite(grad_norm))
        if finite:
            self.optimizer.step()
        else:
            self.skipped_steps += 1
            logger.warning("non-finite loss or gradient: optimizer step skipped")
        metrics = detached(losses)
        metrics["nonfinite_skipped"] = torch.tensor(0.0 if finite else 1.0)
        return self._metrics(metrics, grad_norm, stepped=finite)

    def _metrics(
        self, metrics: dict[str, torch.Tensor], grad_norm: torch.Tensor, *, stepped: bool
    ) -> dict[str, torch.Tensor]:
        metrics["grad_norm"] = grad_norm.detach()
        if self.scheduler is not None:
            metrics["lr"] = torch.tensor(self.optimizer.param_groups[0]["lr"])
            if stepped:
                self.scheduler.step()
        return metrics

    def state_dict(self) -> dict:
        """Optimizer and scheduler state."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`, then the config's lr (:func:`reapply_hyperparameters`)."""
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None:
            if state.get("scheduler") is None:
                raise ValueError("stepper state has no scheduler state but a scheduler is set")
            self.scheduler.load_state_dict(state["scheduler"])
        reapply_hyperparameters(self.optimizer, self.configured, self.scheduler)
