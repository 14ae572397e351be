"""A stepper with one optimizer per named loss method (SAC: critic, actor, temperature).

The loss module lists its parts with ``optim_groups() -> [(method, parameters), ...]`` in update
order. Each optimizer step runs every part in turn through ``train_module`` (so DDP averages
each part's gradients): forward the named method, zero that optimizer's gradients, backward,
clip, step. A later part sees the earlier parts' updates (SAC's actor uses the just-updated
critics), as in the reference implementations.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from learner.stepper import (
    GradClipper,
    configured_hyperparameters,
    detached,
    make_optimizer,
    reapply_hyperparameters,
    total_loss,
)


class MultiOptimizerStepper:
    """One optimizer (same kind and settings) per ``(method, parameters)`` group.

    Args:
        groups: ``(method, optimizer)`` pairs in update order.

    Keyword Args:
        max_grad_norm: Global norm limit applied to each group (0 only measures).

    Examples:
        >>> stepper = MultiOptimizerStepper.from_config(sac_loss, LearnerConfig())  # doctest: +SKIP
    """

    def __init__(
        self, groups: list[tuple[str, torch.optim.Optimizer]], *, max_grad_norm: float = 0.0
    ) -> None:
        if not groups:
            raise ValueError("groups: a multi-optimizer stepper needs at least one group")
        self.groups = groups
        self.configured = {m: configured_hyperparameters(opt) for m, opt in groups}
        self.clippers = [
            GradClipper(
                [p for g in optimizer.param_groups for p in g["params"]], "norm", max_grad_norm, 1.0
            )
            for _, optimizer in groups
        ]

    @classmethod
    def from_config(cls, loss_module: nn.Module, config) -> MultiOptimizerStepper:
        """Builds one ``config.optimizer`` per group of ``loss_module.optim_groups()``.

        Raises:
            ValueError: If the loss module has no ``optim_groups``.
        """
        if not hasattr(loss_module, "optim_groups"):
            raise ValueError(
                "stepper: multi_optimizer needs a loss with optim_groups() (one optimizer per "
                "named loss method)"
            )
        optim_groups: Any = loss_module.optim_groups
        groups = [(method, make_optimizer(params, config)) for method, params in optim_groups()]
        clip = config.max_grad_norm if config.grad_clip == "norm" else 0.0
        return cls(groups, max_grad_norm=clip)

    def step(self, train_module: nn.Module, batch: TensorDict) -> dict[str, torch.Tensor]:
        """Updates every group in order; reports each group's losses and ``grad_norm_<method>``.

        A group whose loss or gradient is non-finite skips its optimizer step
        (``nonfinite_skipped`` is 1).
        """
        metrics: dict[str, torch.Tensor] = {}
        skipped = 0.0  # 1 when a group's non-finite loss or gradient skipped its step
        for (method, optimizer), clip in zip(self.groups, self.clippers, strict=True):
            losses = train_module(batch, method=method)
            optimizer.zero_grad(set_to_none=True)
            total_loss(losses).backward()
            grad_norm = clip().detach()
            metrics[f"grad_norm_{method.removeprefix('loss_')}"] = grad_norm
            if torch.isfinite(grad_norm):  # all-reduced already: every rank agrees
                optimizer.step()
            else:
                skipped = 1.0
            metrics.update(detached(losses))
        metrics["nonfinite_skipped"] = torch.tensor(skipped)
        return metrics

    def state_dict(self) -> dict:
        """Every optimizer's state, by method name."""
        return {"optimizers": {method: opt.state_dict() for method, opt in self.groups}}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`.

        Raises:
            ValueError: If the saved groups differ from this stepper's.
        """
        saved = state["optimizers"]
        if set(saved) != {method for method, _ in self.groups}:
            raise ValueError(f"stepper state has groups {sorted(saved)}, the loss has others")
        for method, optimizer in self.groups:
            optimizer.load_state_dict(saved[method])
            reapply_hyperparameters(optimizer, self.configured[method])  # the config's lr wins
