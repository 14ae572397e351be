"""Pieces shared by the policy-gradient losses (PPO, A2C, REINFORCE).

A batch is either steps (``[n]`` items, a feed-forward policy) or sequences: items of ``[L]``
steps with ``recurrent_state``, ``reset`` and ``valid`` (``collector.sequences``, a recurrent
policy). :func:`evaluate_steps` runs the network either way and returns the batch's real steps
flattened, so a loss reads the same columns and padding never enters it.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from collector.networks.distributions import masked_logits
from collector.sequences import RESET_COLUMN, STATE_COLUMN


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


def evaluate_steps(
    network: Any, batch: TensorDict
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, TensorDict]:
    """:func:`evaluate_actions` over steps or sequences.

    Sequences run through the recurrent network from their stored state with their ``reset``
    flags (truncated backpropagation through time over each sequence); the padded steps
    (``valid`` False) are dropped from the outputs and from every per-step column.

    Returns:
        ``(log_prob, entropy, value, steps)``, each ``[N]`` over the batch's ``N`` real steps;
        ``steps`` holds the batch's per-step columns (the batch itself for steps).
    """
    if batch.get(STATE_COLUMN, None) is None:
        return (*evaluate_actions(network, batch), batch)
    valid = batch["valid"].to(torch.bool)
    out, value, _ = network(batch["observation"], batch[STATE_COLUMN], batch[RESET_COLUMN], valid)
    columns = {
        key: value[valid]
        for key, value in batch.items()
        if key not in ("observation", STATE_COLUMN) and value.shape[:2] == valid.shape
    }
    steps = TensorDict(columns, batch_size=[int(valid.sum())], device=batch.device)
    out = masked_logits(out[valid], steps.get("action_mask", None))
    distribution = network.distribution(out)
    action = steps["action"]
    if action.dtype.is_floating_point is False:
        action = action.long()
    return distribution.log_prob(action), distribution.entropy(), value[valid], steps


def normalized(advantage: torch.Tensor, enabled: bool) -> torch.Tensor:
    """``(A - mean A) / (std A + 1e-8)`` over the minibatch when ``enabled`` (and n > 1)."""
    if not enabled or advantage.numel() < 2:
        return advantage
    return (advantage - advantage.mean()) / (advantage.std() + 1e-8)


@torch.no_grad()
def follow(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """Copies (``tau >= 1``) or Polyak-averages ``online``'s parameters into ``target``'s.

    The target-network update every value-based and actor-critic loss here shares (DQN,
    sequence Q-learning, SAC, APPO's old policy, the multi-agent mixers).

    Examples:
        >>> a, b = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
        >>> follow(a, b, 1.0)
        >>> bool(torch.equal(a.weight, b.weight))
        True
    """
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        if tau >= 1.0:
            t.copy_(o)
        else:
            t.lerp_(o, tau)
