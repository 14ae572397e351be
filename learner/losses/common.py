"""Pieces shared by the policy-gradient losses (PPO, A2C, REINFORCE)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from collector.networks.distributions import masked_logits


def evaluate_actions(
    network: Any, batch: TensorDict
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Runs an ``ActorCritic`` on the batch's observations.

    A batch with ``action_mask`` (``collector.action_mask_key``) masks the actor's logits first
    (``collector.networks.distributions.masked_logits``): the entropy covers allowed actions only.

    Returns:
        ``(log_prob, entropy, value)`` of the stored actions under the current policy, each
        ``[n]``.
    """
    out, value = network(batch["observation"])
    out = masked_logits(out, batch.get("action_mask", None))
    distribution = network.distribution(out)
    action = batch["action"]
    if action.dtype.is_floating_point is False:
        action = action.long()
    return distribution.log_prob(action), distribution.entropy(), value


def normalized(advantage: torch.Tensor, enabled: bool) -> torch.Tensor:
    """``(A - mean A) / (std A + 1e-8)`` over the minibatch when ``enabled`` (and n > 1)."""
    if not enabled or advantage.numel() < 2:
        return advantage
    return (advantage - advantage.mean()) / (advantage.std() + 1e-8)
