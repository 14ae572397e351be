"""Optimization steppers: one optimizer step from a loss module and a batch."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn


def total_loss(losses: TensorDict) -> torch.Tensor:
    """Sum of the ``loss_*`` entries (TorchRL's LossModule convention)."""
    terms = [v for k, v in losses.items() if k.startswith("loss_")]
    if not terms:
        raise ValueError(f"the loss module returned no loss_* entry (keys: {list(losses.keys())})")
    return torch.stack(terms).sum()


class DefaultStepper:
    """Zero grads, backward of the summed losses, clip by global norm, optimizer step.

    Args:
        optimizer: The optimizer over the trainable parameters.
        parameters: The parameters to clip (those with gradients).
        max_grad_norm: Clip threshold; 0 only measures the norm.
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, parameters: list[nn.Parameter], max_grad_norm: float
    ) -> None:
        self.optimizer = optimizer
        self.parameters = parameters
        self.max_grad_norm = max_grad_norm

    def step(self, train_module: nn.Module, batch: TensorDict) -> dict[str, torch.Tensor]:
        """Runs one optimizer step and returns its scalar metrics as 0-d tensors."""
        losses = train_module(batch)
        loss = total_loss(losses)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        limit = self.max_grad_norm if self.max_grad_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, limit)
        self.optimizer.step()
        metrics = {k: v.detach() for k, v in losses.items() if v.ndim == 0}
        metrics["grad_norm"] = grad_norm.detach()
        return metrics
