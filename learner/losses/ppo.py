"""Proximal policy optimization (Schulman et al., 2017), the clipped-surrogate variant.

For a minibatch of ``observation, action, log_prob`` (of the sampling policy), ``advantage``
(GAE) and ``value_target`` (``advantage + value``), with ``value`` the sampling-time critic::

    ratio        = exp(log pi(a | s) - log pi_old(a | s))
    A            = (advantage - mean) / std                        (per minibatch, optional)
    loss_objective = mean(max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)))
    loss_critic  = vf_coef * 0.5 * mean(max((V(s) - R)^2, (V_clip - R)^2))
                   with V_clip = value + clip(V(s) - value, -eps_v, eps_v)  (clip_value_loss)
                   or vf_coef * 0.5 * mean((V(s) - R)^2)
    loss_entropy = -ent_coef * mean(H[pi(. | s)])

Diagnostics: ``approx_kl = mean((ratio - 1) - log ratio)`` (Schulman's k3 estimator),
``clip_fraction`` (share of items whose ratio left ``[1 - eps, 1 + eps]``), ``entropy``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

from learner.losses.common import evaluate_steps, normalized


class PPOLoss(nn.Module):
    """PPO's clipped surrogate, value and entropy terms.

    Args:
        actor_critic: ``collector.networks.actor_critic.ActorCritic`` (the published policy).

    Keyword Args:
        clip_epsilon: Ratio clipping ``eps``.
        vf_coef: Weight of the value loss.
        ent_coef: Weight of the entropy bonus.
        clip_value_loss: Clip the value update around the sampling-time value.
        value_clip_epsilon: ``eps_v`` of the clipped value loss.
        normalize_advantage: Normalize advantages per minibatch.
    """

    def __init__(
        self,
        actor_critic: nn.Module,
        *,
        clip_epsilon: float = 0.2,
        vf_coef: float = 0.5,
        ent_coef: float = 0.0,
        clip_value_loss: bool = False,
        value_clip_epsilon: float = 0.2,
        normalize_advantage: bool = True,
    ) -> None:
        super().__init__()
        self.actor_critic = actor_critic
        self.clip_epsilon = clip_epsilon
        self.vf_coef = vf_coef
        self.ent_coef = ent_coef
        self.clip_value_loss = clip_value_loss
        self.value_clip_epsilon = value_clip_epsilon
        self.normalize_advantage = normalize_advantage

    def forward(self, batch: TensorDict) -> TensorDict:
        """Returns ``loss_objective``, ``loss_critic``, ``loss_entropy`` and diagnostics."""
        log_prob, entropy, value, batch = evaluate_steps(self.actor_critic, batch)
        log_ratio = log_prob - batch["log_prob"]
        ratio = log_ratio.exp()
        advantage = normalized(batch["advantage"], self.normalize_advantage)
        eps = self.clip_epsilon
        surrogate = torch.max(-advantage * ratio, -advantage * ratio.clamp(1 - eps, 1 + eps))
        target = batch["value_target"]
        value_error = (value - target).square()
        if self.clip_value_loss:
            old = batch["value"]
            clipped = old + (value - old).clamp(-self.value_clip_epsilon, self.value_clip_epsilon)
            value_error = torch.max(value_error, (clipped - target).square())
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()
            clip_fraction = ((ratio - 1).abs() > eps).float().mean()
        entropy = entropy.mean()
        return TensorDict(
            {
                "loss_objective": surrogate.mean(),
                "loss_critic": self.vf_coef * 0.5 * value_error.mean(),
                "loss_entropy": -self.ent_coef * entropy,
                "entropy": entropy.detach(),
                "approx_kl": approx_kl,
                "clip_fraction": clip_fraction,
                "value_mean": value.detach().mean(),
            },
            batch_size=[],
        )


def ppo_loss(policy_network: nn.Module, config) -> PPOLoss:
    """The built-in ``loss: ppo`` factory (options from ``config.onpolicy``)."""
    options = config.onpolicy
    return PPOLoss(
        policy_network,
        clip_epsilon=options.clip_epsilon,
        vf_coef=options.vf_coef,
        ent_coef=options.ent_coef,
        clip_value_loss=options.clip_value_loss,
        value_clip_epsilon=options.value_clip_epsilon,
        normalize_advantage=options.normalize_advantage,
    )
