"""R2D2: recurrent double DQN over stored sequences (Kapturowski et al., ICLR 2019).

R2D2 is the sequence Q-learning core (``learner.losses.sequence_q``: burn-in, n-step double-Q
targets over each sequence, masks, target updates) with a squared penalty, value rescaling ``h``
and the mixed sequence priority: the core's math (its module docstring: burn-in, values,
n-step double-Q targets ``y_t``, priority) with ``h`` the value rescaling below and the penalty
``0.5 (y_t - q_t)^2``.

``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x`` is the value rescaling
(Pohlen et al., 2018; ``eps = 1e-3``) with the closed-form inverse

    h^{-1}(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1);

without rescaling (``learner.r2d2.value_rescaling: false``) ``h`` is the identity.
"""

from __future__ import annotations

import torch
from torch import nn

from learner.losses.sequence_q import SequenceQLoss, mixed_priority


def rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x``.

    Examples:
        >>> x = torch.tensor([-50.0, 0.0, 3.0])
        >>> torch.allclose(unrescale(rescale(x)), x, atol=1e-4)
        True
    """
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def unrescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """``h^{-1}``, the inverse of :func:`rescale`."""
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root**2 - 1.0)


class R2D2Loss(SequenceQLoss):
    """R2D2's sequence loss (the module docstring has the math).

    Args:
        value_network: The online recurrent Q-network
            (``collector.networks.recurrent.RecurrentQ``).

    Keyword Args:
        gamma: Discount factor.
        n_step: Steps of the returns.
        priority_eta: ``eta`` of the sequence priority.
        value_rescaling: Apply ``h`` and ``h^{-1}``.
        rescale_epsilon: ``eps`` of ``h``.
    """

    def __init__(
        self,
        value_network: nn.Module,
        *,
        gamma: float = 0.997,
        n_step: int = 5,
        priority_eta: float = 0.9,
        value_rescaling: bool = True,
        rescale_epsilon: float = 1e-3,
    ) -> None:
        super().__init__(
            value_network,
            gamma=gamma,
            n_step=n_step,
            double_q=True,
            penalty="squared",
            priority_eta=priority_eta,
        )
        self.value_rescaling, self.eps = value_rescaling, rescale_epsilon

    def _h(self, x: torch.Tensor) -> torch.Tensor:
        return rescale(x, self.eps) if self.value_rescaling else x

    def _h_inv(self, x: torch.Tensor) -> torch.Tensor:
        return unrescale(x, self.eps) if self.value_rescaling else x


def r2d2_loss(policy_network: nn.Module, config) -> R2D2Loss:
    """The built-in ``loss: r2d2`` factory (options: ``learner.r2d2``)."""
    options = config.r2d2
    return R2D2Loss(
        policy_network,
        gamma=config.gamma,
        n_step=options.n_step,
        priority_eta=options.priority_eta,
        value_rescaling=options.value_rescaling,
        rescale_epsilon=options.rescale_epsilon,
    )


__all__ = ["R2D2Loss", "mixed_priority", "r2d2_loss", "rescale", "unrescale"]
