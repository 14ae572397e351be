"""Deep Q-learning (Mnih et al., 2015) with double Q (van Hasselt et al., 2016).

Dueling heads (Wang et al., 2016) are a property of the Q-network (``learner.dueling``, see
``collector.networks.q_mlp.DuelingHead``), not of the loss.

With ``learner.recurrent`` the factory builds recurrent DQN instead: the sequence Q-learning
core (``learner.losses.sequence_q.SequenceQLoss``) with this loss's Huber penalty and double
Q-learning, n-step returns over each sequence (``learner.dqn.n_step``) and a mixed sequence
priority (``learner.dqn.priority_eta``).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

from collector.networks.distributions import masked_logits
from learner.losses.common import follow


class DQNLoss(nn.Module):
    """(Double) DQN loss with a Huber penalty and a target network.

    For a batch of ``observation, action, reward, next_observation, terminated``::

        q = Q(observation)[action]
        next_action = argmax_a Q(next_observation)          # double DQN; Q_target if not double
        target = reward + discount * (1 - terminated) * Q_target(next_observation)[next_action]
        loss_q = mean(weight * huber(q, target))

    ``discount`` is the batch's ``n_step_discount`` (gamma^k of n-step transitions) when present,
    else ``gamma``; ``weight`` is the batch's importance weight (prioritized replay) when
    present, else 1.

    Truncated transitions bootstrap (only ``terminated`` stops the return). With action masks
    (``collector.action_mask_key``) the batch carries ``next_action_mask``: the argmax (and so
    the max) of the target runs over the next state's allowed actions only.

    Args:
        value_network: The online Q-network.
        gamma: Discount factor.
        double_dqn: Select next actions with the online network.
    """

    def __init__(self, value_network: nn.Module, *, gamma: float = 0.99, double_dqn: bool = True):
        super().__init__()
        self.value_network = value_network
        self.target_network = copy.deepcopy(value_network).requires_grad_(False)
        self.gamma = gamma
        self.double_dqn = double_dqn

    def forward(self, batch: TensorDict) -> TensorDict:
        """Returns ``loss_q`` and the diagnostics ``q_mean`` and ``td_error`` (per item)."""
        obs = batch["observation"]
        action = batch["action"].long()
        q_values = self.value_network(obs).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_obs = batch["next_observation"]
            next_target = self.target_network(next_obs)
            next_mask = batch.get("next_action_mask", None)
            chooser = self.value_network(next_obs) if self.double_dqn else next_target
            next_action = masked_logits(chooser, next_mask).argmax(dim=-1, keepdim=True)
            next_q = next_target.gather(-1, next_action).squeeze(-1)
            not_done = 1.0 - batch["terminated"].to(q_values.dtype)
            # n-step transitions carry their own discount gamma^k (collector/nstep.py).
            discount = batch.get("n_step_discount", None)
            discount = self.gamma if discount is None else discount.to(q_values.dtype)
            target = batch["reward"].to(q_values.dtype) + discount * not_done * next_q
        # Prioritized replay sends importance weights; uniform batches weigh items equally.
        weight = batch.get("weight", None)
        if weight is None:
            loss = F.smooth_l1_loss(q_values, target)
        else:
            per_item = F.smooth_l1_loss(q_values, target, reduction="none")
            loss = (weight.to(q_values.dtype) * per_item).mean()
        return TensorDict(
            {
                "loss_q": loss,
                "q_mean": q_values.detach().mean(),
                "td_error": (target - q_values).detach(),
            },
            batch_size=[],
        )

    @torch.no_grad()
    def update_target(self, tau: float = 1.0) -> None:
        """Copies (``tau=1``) or Polyak-averages the online weights into the target network."""
        follow(self.target_network, self.value_network, tau)


def dqn_loss(policy_network: nn.Module, config) -> nn.Module:
    """The built-in ``loss: dqn`` factory: :class:`DQNLoss`, or recurrent DQN's sequence loss.

    With ``learner.recurrent`` (a ``RecurrentQ`` network, sequence batches) it returns a
    ``SequenceQLoss`` with DQN's Huber penalty, ``double_dqn`` and ``learner.dqn``'s options.
    """
    if config.recurrent != "none":
        from learner.losses.sequence_q import SequenceQLoss

        return SequenceQLoss(
            policy_network,
            gamma=config.gamma,
            n_step=config.dqn.n_step,
            double_q=config.double_dqn,
            penalty="huber",
            priority_eta=config.dqn.priority_eta,
        )
    return DQNLoss(policy_network, gamma=config.gamma, double_dqn=config.double_dqn)
