"""Advantage actor-critic (Mnih et al., 2016, synchronous form).

One gradient step per collected batch (no clipping, no epochs). With ``advantage`` from the
collector (n-step returns: GAE with ``lambda = 1``, or GAE) and ``value_target = advantage +
value``::

    loss_objective = -mean(log pi(a | s) * A)                  (A optionally normalized)
    loss_critic    = vf_coef * 0.5 * mean((V(s) - R)^2)
    loss_entropy   = -ent_coef * mean(H[pi(. | s)])
"""

from __future__ import annotations

from tensordict import TensorDict
from torch import nn

from learner.losses.common import evaluate_steps, normalized


class A2CLoss(nn.Module):
    """A2C's policy-gradient, value and entropy terms.

    Args:
        actor_critic: ``collector.networks.actor_critic.ActorCritic`` (the published policy).

    Keyword Args:
        vf_coef: Weight of the value loss.
        ent_coef: Weight of the entropy bonus.
        normalize_advantage: Normalize advantages over the batch.
    """

    def __init__(
        self,
        actor_critic: nn.Module,
        *,
        vf_coef: float = 0.5,
        ent_coef: float = 0.01,
        normalize_advantage: bool = False,
    ) -> None:
        super().__init__()
        self.actor_critic = actor_critic
        self.vf_coef = vf_coef
        self.ent_coef = ent_coef
        self.normalize_advantage = normalize_advantage

    def forward(self, batch: TensorDict) -> TensorDict:
        """Returns ``loss_objective``, ``loss_critic``, ``loss_entropy`` and diagnostics."""
        log_prob, entropy, value, batch = evaluate_steps(self.actor_critic, batch)
        advantage = normalized(batch["advantage"], self.normalize_advantage)
        entropy = entropy.mean()
        return TensorDict(
            {
                "loss_objective": -(log_prob * advantage).mean(),
                "loss_critic": self.vf_coef * 0.5 * (value - batch["value_target"]).square().mean(),
                "loss_entropy": -self.ent_coef * entropy,
                "entropy": entropy.detach(),
                "value_mean": value.detach().mean(),
            },
            batch_size=[],
        )


def a2c_loss(policy_network: nn.Module, config) -> A2CLoss:
    """The built-in ``loss: a2c`` factory (options from ``config.onpolicy``)."""
    options = config.onpolicy
    return A2CLoss(
        policy_network,
        vf_coef=options.vf_coef,
        ent_coef=options.ent_coef,
        normalize_advantage=options.normalize_advantage,
    )
