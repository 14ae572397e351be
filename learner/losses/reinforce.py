"""REINFORCE (Williams, 1992): the Monte-Carlo policy gradient, with an optional baseline.

The collector runs complete episodes and stores each step's discounted return-to-go
``G_t = sum_k gamma^k r_{t+k}`` as ``value_target`` and ``advantage = G_t - V(s_t)`` (with a
baseline) or ``G_t`` (without)::

    loss_objective = -mean(log pi(a_t | s_t) * A_t)               (A optionally normalized)
    loss_critic    = vf_coef * 0.5 * mean((V(s_t) - G_t)^2)        (baseline only)
    loss_entropy   = -ent_coef * mean(H[pi(. | s_t)])

Without a baseline the critic is not trained (its parameters get no gradient, which DDP is told
about: ``find_unused_parameters``).
"""

from __future__ import annotations

from tensordict import TensorDict
from torch import nn

from learner.losses.common import evaluate_steps, normalized


class ReinforceLoss(nn.Module):
    """REINFORCE's policy-gradient term, plus the baseline's regression and an entropy bonus.

    Args:
        actor_critic: ``collector.networks.actor_critic.ActorCritic`` (the published policy).

    Keyword Args:
        baseline: Train the critic as a baseline (its values are subtracted collector-side).
        vf_coef: Weight of the baseline's loss.
        ent_coef: Weight of the entropy bonus.
        normalize_advantage: Normalize advantages over the batch.
    """

    def __init__(
        self,
        actor_critic: nn.Module,
        *,
        baseline: bool = True,
        vf_coef: float = 0.5,
        ent_coef: float = 0.0,
        normalize_advantage: bool = True,
    ) -> None:
        super().__init__()
        self.actor_critic = actor_critic
        self.baseline = baseline
        self.vf_coef = vf_coef
        self.ent_coef = ent_coef
        self.normalize_advantage = normalize_advantage
        self.find_unused_parameters = not baseline

    def forward(self, batch: TensorDict) -> TensorDict:
        """Returns ``loss_objective``, ``loss_entropy``, ``loss_critic`` (baseline) and more."""
        log_prob, entropy, value, batch = evaluate_steps(self.actor_critic, batch)
        advantage = normalized(batch["advantage"], self.normalize_advantage)
        entropy = entropy.mean()
        out = {
            "loss_objective": -(log_prob * advantage).mean(),
            "loss_entropy": -self.ent_coef * entropy,
            "entropy": entropy.detach(),
            "return_mean": batch["value_target"].mean(),
        }
        if self.baseline:
            error = (value - batch["value_target"]).square().mean()
            out["loss_critic"] = self.vf_coef * 0.5 * error
        return TensorDict(out, batch_size=[])


def reinforce_loss(policy_network: nn.Module, config) -> ReinforceLoss:
    """The built-in ``loss: reinforce`` factory (options from ``config.onpolicy``)."""
    options = config.onpolicy
    return ReinforceLoss(
        policy_network,
        baseline=options.baseline,
        vf_coef=options.vf_coef,
        ent_coef=options.ent_coef,
        normalize_advantage=options.normalize_advantage,
    )
