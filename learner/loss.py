"""Losses: modules mapping a TensorDict batch to a TensorDict of ``loss_*`` terms.

This follows TorchRL's ``LossModule`` convention: the optimizer minimizes the sum of the
``loss_*`` entries, and any other entry is a detached diagnostic (a per-item entry such as
``td_error`` can feed prioritized replay).

A loss is chosen by ``LearnerConfig.loss``: a built-in name (a key of ``learner.losses.LOSSES``,
one module each in ``learner.losses``) or a ``"module:factory"`` path; a factory is called as
``factory(policy_network, config)`` (:func:`learner.losses.loss_factory_for`). The policy network
(built from the model spec, the one published to collectors) is passed in; a loss may build further
networks itself (critics, target copies). Losses with several terms optimized separately expose them
as named methods (``loss_actor(batch)``, ``loss_critic(batch)``); :class:`LossDispatch` lets a
stepper call them through DDP (``train_module(batch, method="loss_actor")``).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

__all__ = ["LossDispatch"]


class LossDispatch(nn.Module):
    """Routes ``forward(batch, method=...)`` to a named loss method, so DDP sees every call.

    DDP only synchronizes gradients of computations that go through its ``forward``; a stepper
    that optimizes ``loss_actor`` and ``loss_critic`` separately calls
    ``train_module(batch, method="loss_actor")``. The output is returned as a plain ``dict``:
    DDP looks for the output tensors in dicts (not in TensorDicts) to find the parameters a call
    did not use (``find_unused_parameters``).

    Args:
        loss_module: The loss; ``method=None`` calls its ``forward``.
    """

    def __init__(self, loss_module: nn.Module) -> None:
        super().__init__()
        self.loss_module = loss_module

    def forward(self, batch: TensorDict, method: str | None = None) -> dict[str, torch.Tensor]:
        """Calls ``loss_module(batch)`` or ``loss_module.<method>(batch)``."""
        call = self.loss_module if method is None else getattr(self.loss_module, method)
        return dict(call(batch).items())
