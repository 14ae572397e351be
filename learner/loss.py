"""Losses: modules mapping a TensorDict batch to a TensorDict of ``loss_*`` terms.

This follows TorchRL's ``LossModule`` convention: the optimizer minimizes the sum of the
``loss_*`` entries, and any other entry is a detached diagnostic.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn


class DQNLoss(nn.Module):
    """(Double) DQN loss with a Huber penalty and a target network.

    For a batch of ``observation, action, reward, next_observation, terminated``::

        q = Q(observation)[action]
        next_action = argmax_a Q(next_observation)          # double DQN; Q_target if not double
        target = reward + gamma * (1 - terminated) * Q_target(next_observation)[next_action]
        loss_q = huber(q, target)

    Truncated transitions bootstrap (only ``terminated`` stops the return).

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
            if self.double_dqn:
                next_action = self.value_network(next_obs).argmax(dim=-1, keepdim=True)
            else:
                next_action = next_target.argmax(dim=-1, keepdim=True)
            next_q = next_target.gather(-1, next_action).squeeze(-1)
            not_done = 1.0 - batch["terminated"].to(q_values.dtype)
            target = batch["reward"].to(q_values.dtype) + self.gamma * not_done * next_q
        loss = F.smooth_l1_loss(q_values, target)
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
        for target, online in zip(
            self.target_network.parameters(), self.value_network.parameters(), strict=True
        ):
            if tau >= 1.0:
                target.copy_(online)
            else:
                target.lerp_(online, tau)
