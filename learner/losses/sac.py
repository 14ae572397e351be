"""Soft actor-critic (Haarnoja et al., 2018), with a learned temperature.

Twin Q-networks ``Q_1, Q_2`` with Polyak-averaged targets ``Q'_1, Q'_2``, a tanh-Gaussian actor
``pi`` (``collector.networks.squashed``) and a temperature ``alpha = exp(log_alpha)``. For a batch
of ``observation s, action a, reward r, next_observation s', terminated d`` and the n-step
``discount`` (``gamma^k``)::

    a' ~ pi(. | s')
    y            = r + discount * (1 - d) * (min_i Q'_i(s', a') - alpha * log pi(a' | s'))
    loss_qvalue  = mean((Q_1(s, a) - y)^2) + mean((Q_2(s, a) - y)^2)
    a~ ~ pi(. | s)                                   (reparameterized)
    loss_actor   = mean(alpha * log pi(a~ | s) - min_i Q_i(s, a~))
    loss_alpha   = -mean(log_alpha * (log pi(a~ | s) + target_entropy))

``target_entropy`` defaults to ``-action_dim``. The three terms are separate methods
(``loss_critic``, ``loss_actor``, ``loss_alpha``), each minimized by its own optimizer in that
order (:meth:`SACLoss.optim_groups`); targets move by ``Q' <- (1 - tau) Q' + tau Q`` after each
step (``update_target``).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

from collector.networks.common import mlp_trunk
from learner.losses.common import follow


class QNetwork(nn.Module):
    """``Q(s, a)``: an MLP over the concatenated observation and action."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: tuple[int, ...]) -> None:
        super().__init__()
        self.trunk, width = mlp_trunk(obs_dim + action_dim, hidden_sizes)
        self.head = nn.Linear(width, 1)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q-values ``[n]``."""
        return self.head(self.trunk(torch.cat([obs, action], dim=-1))).squeeze(-1)


class SACLoss(nn.Module):
    """SAC's critic, actor and temperature losses (see the module docstring).

    Args:
        actor: ``collector.networks.squashed.SquashedGaussianActor`` (the published policy);
            when its ``body`` (a user's ``learner.network``) has ``make_critic()``, the twin
            critics are two modules made by it, else MLPs of ``hidden_sizes``.

    Keyword Args:
        gamma: Discount used when a batch carries no ``n_step_discount``.
        hidden_sizes: Hidden widths of each Q-network.
        init_alpha: Initial temperature.
        learn_alpha: Learn the temperature (else it stays ``init_alpha``).
        target_entropy: Entropy target; None is ``-action_dim``.
    """

    def __init__(
        self,
        actor: Any,
        *,
        gamma: float = 0.99,
        hidden_sizes: tuple[int, ...] = (256, 256),
        init_alpha: float = 1.0,
        learn_alpha: bool = True,
        target_entropy: float | None = None,
    ) -> None:
        super().__init__()
        spec = actor.spec
        self.actor = actor
        # A user's actor body may bring its critic (collector.networks.contracts.QCritic).
        make_critic = getattr(getattr(actor, "body", None), "make_critic", None)
        if make_critic is None:
            make_critic = lambda: QNetwork(spec.obs_dim, spec.action_dim, hidden_sizes)  # noqa: E731
        self.q1, self.q2 = make_critic(), make_critic()
        self.q1_target = copy.deepcopy(self.q1).requires_grad_(False)
        self.q2_target = copy.deepcopy(self.q2).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)), requires_grad=learn_alpha)
        self.gamma = gamma
        self.target_entropy = -float(spec.action_dim) if target_entropy is None else target_entropy
        self.find_unused_parameters = True  # each method uses a subset of the parameters

    @property
    def alpha(self) -> torch.Tensor:
        """The temperature ``exp(log_alpha)`` (detached)."""
        return self.log_alpha.detach().exp()

    def loss_critic(self, batch: TensorDict) -> TensorDict:
        """``loss_qvalue`` plus ``q_mean`` and the per-item ``td_error`` (prioritized replay)."""
        obs, action = batch["observation"], batch["action"]
        with torch.no_grad():
            next_obs = batch["next_observation"]
            next_action, next_log_prob = self.actor.sample(next_obs)
            next_q = torch.min(
                self.q1_target(next_obs, next_action), self.q2_target(next_obs, next_action)
            )
            discount = batch.get("n_step_discount", None)
            discount = self.gamma if discount is None else discount
            not_done = 1.0 - batch["terminated"].float()
            target = batch["reward"] + discount * not_done * (next_q - self.alpha * next_log_prob)
        q1, q2 = self.q1(obs, action), self.q2(obs, action)
        weight = batch.get("weight", None)
        if weight is None:
            loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        else:
            loss = (weight * ((q1 - target).square() + (q2 - target).square())).mean()
        return TensorDict(
            {
                "loss_qvalue": loss,
                "q_mean": q1.detach().mean(),
                "td_error": (target - torch.min(q1, q2)).detach(),
            },
            batch_size=[],
        )

    def loss_actor(self, batch: TensorDict) -> TensorDict:
        """``loss_actor`` and the policy's ``entropy`` estimate ``-mean log pi``."""
        obs = batch["observation"]
        action, log_prob = self.actor.sample(obs)
        q = torch.min(self.q1(obs, action), self.q2(obs, action))
        return TensorDict(
            {
                "loss_actor": (self.alpha * log_prob - q).mean(),
                "entropy": -log_prob.detach().mean(),
            },
            batch_size=[],
        )

    def loss_alpha(self, batch: TensorDict) -> TensorDict:
        """``loss_alpha`` toward the target entropy, and ``alpha``."""
        with torch.no_grad():
            _, log_prob = self.actor.sample(batch["observation"])
        loss = -(self.log_alpha * (log_prob + self.target_entropy)).mean()
        return TensorDict({"loss_alpha": loss, "alpha": self.alpha}, batch_size=[])

    def optim_groups(self) -> list[tuple[str, list[nn.Parameter]]]:
        """``(method, parameters)`` in update order: critic, actor, temperature."""
        groups = [
            ("loss_critic", [*self.q1.parameters(), *self.q2.parameters()]),
            ("loss_actor", list(self.actor.parameters())),
        ]
        if self.log_alpha.requires_grad:
            groups.append(("loss_alpha", [self.log_alpha]))
        return groups

    @torch.no_grad()
    def update_target(self, tau: float = 0.005) -> None:
        """Polyak-averages the critics into their targets (``tau = 1`` copies)."""
        follow(self.q1_target, self.q1, tau)
        follow(self.q2_target, self.q2, tau)


def sac_loss(policy_network: nn.Module, config) -> nn.Module:
    """The built-in ``loss: sac`` factory (options from ``config.sac``).

    With ``learner.recurrent`` the loss is ``learner.losses.sac_sequences`` over stored sequences.
    """
    if getattr(config, "recurrent", "none") != "none":
        from learner.losses.sac_sequences import sac_sequence_loss

        return sac_sequence_loss(policy_network, config)
    options = config.sac
    return SACLoss(
        policy_network,
        gamma=config.gamma,
        hidden_sizes=options.critic_hidden_sizes or config.hidden_sizes,
        init_alpha=options.init_alpha,
        learn_alpha=options.learn_alpha,
        target_entropy=options.target_entropy,
    )
