"""What the V-trace losses share: the actor-critic over chunks, V-trace of a chunk batch, masks.

A chunk batch (``collector.chunks``) has ``observation [B, T + 1, ...]`` and per step
``action``, ``log_prob`` (the behaviour policy's), ``reward``, ``terminated``, ``truncated``
and ``valid`` ``[B, T]``; a recurrent policy's chunks add ``recurrent_state [B, S]`` (the state
before ``x_0``) and ``reset [B, T + 1]``, and the network runs over each chunk from that state.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from collector.networks.distributions import masked_logits
from collector.sequences import RESET_COLUMN, STATE_COLUMN
from learner.vtrace import VTrace, vtrace


def evaluate_chunks(network: Any, batch: TensorDict) -> tuple[torch.Tensor, ...]:
    """Runs the actor-critic over every state of the chunks.

    Returns:
        ``(log_prob, entropy, value, next_value)``, each ``[B, T]``: the stored actions'
        log-probabilities and the entropies under the current policy, ``V(x_t)`` and
        ``V(x_{t+1})``.
    """
    observation = batch["observation"]
    size, steps = batch["action"].shape[0], batch["action"].shape[1]
    state = batch.get(STATE_COLUMN, None)
    if state is not None:  # truncated BPTT over the chunk from its stored state
        out, values, _ = network(observation, state, batch[RESET_COLUMN])
        out = out[:, :steps].flatten(0, 1)
    else:
        if isinstance(observation, torch.Tensor):
            observation = observation.flatten(0, 1)
        else:  # a structured observation: a mapping of [B, T + 1, ...] tensors
            observation = {key: value.flatten(0, 1) for key, value in observation.items()}
        out, values = network(observation)
        out = out.unflatten(0, (size, steps + 1))[:, :steps].flatten(0, 1)
        values = values.unflatten(0, (size, steps + 1))
    mask = batch.get("action_mask", None)  # [B, T, width] (collector.action_mask_key)
    out = masked_logits(out, None if mask is None else mask.flatten(0, 1))
    distribution = network.distribution(out)
    action = batch["action"].flatten(0, 1)
    if not action.dtype.is_floating_point:
        action = action.long()
    log_prob = distribution.log_prob(action).unflatten(0, (size, steps))
    entropy = distribution.entropy().unflatten(0, (size, steps))
    return log_prob, entropy, values[:, :steps], values[:, 1:]


def chunk_vtrace(
    batch: TensorDict,
    target_log_prob: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    *,
    gamma: float,
    rho_bar: float,
    c_bar: float,
    rho_bar_pg: float | None,
    lam: float,
) -> VTrace:
    """V-trace of a chunk batch (targets: the inputs are detached here)."""
    terminated = batch["terminated"].to(torch.bool)
    return vtrace(
        behaviour_log_prob=batch["log_prob"].to(value.dtype),
        target_log_prob=target_log_prob.detach(),
        reward=batch["reward"].to(value.dtype),
        value=value.detach(),
        bootstrap_value=next_value.detach(),
        discount=gamma * (~terminated).to(value.dtype),
        cut=terminated | batch["truncated"].to(torch.bool),
        rho_bar=rho_bar,
        c_bar=c_bar,
        rho_bar_pg=rho_bar_pg,
        lam=lam,
    )


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over the steps where ``mask`` is set (0 when none is)."""
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def normalized(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` standardized over the steps where ``mask`` is set (masked steps: unchanged).

    The policy-gradient advantages' scale then no longer depends on the rewards' (PPO's
    ``normalize_advantage``): with Pong's sparse rewards the raw V-trace advantages are small
    beside the entropy bonus, which then keeps the policy uniform.
    """
    mean = masked_mean(values, mask)
    std = masked_mean((values - mean) ** 2, mask).sqrt()
    return torch.where(mask > 0, (values - mean) / (std + 1e-8), values)


def diagnostics(
    targets: VTrace, value: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor, rho_bar
) -> dict[str, torch.Tensor]:
    """``rho_mean``, ``rho_clipped``, ``entropy`` and ``value_mean`` (detached)."""
    return {
        "rho_mean": masked_mean(targets.rho, mask),
        "rho_clipped": masked_mean((targets.rho > rho_bar).to(mask.dtype), mask),
        "entropy": entropy.detach(),
        "value_mean": masked_mean(value.detach(), mask),
    }
