"""V-trace off-policy targets (IMPALA, Espeholt et al., 2018), a pure tensor core.

For ``B`` chunks of ``T`` consecutive steps of one env each (layout ``[B, T]``), actions drawn
from the behaviour policy ``mu`` (the collector's) and evaluated under the target policy ``pi``
(the learner's current one)::

    rho_t   = pi(a_t | x_t) / mu(a_t | x_t) = exp(target_log_prob_t - behaviour_log_prob_t)
    delta_t = min(rho_bar, rho_t) * (r_t + discount_t * V(x_{t+1}) - V(x_t))
    c_t     = lam * min(c_bar, rho_t)

    v_s = V(x_s) + sum_{t >= s} (prod_{i=s}^{t-1} discount_i * c_i) * delta_t        (eq. 1)

computed backwards over ``t`` (``v_T - V(x_T) = 0`` past the chunk's end)::

    v_t - V(x_t) = delta_t + discount_t * c_t * (1 - cut_t) * (v_{t+1} - V(x_{t+1}))

and the policy-gradient advantage, with ``v_next_t = v_{t+1}`` inside the episode and the chunk,
else ``V(x_{t+1})``::

    A_t = min(rho_bar_pg, rho_t) * (r_t + discount_t * v_next_t - V(x_t))

The paper's ``gamma^(t-s)`` becomes a product of per-step discounts, ``discount_t = gamma *
(1 - terminated_t)``. ``V(x_{t+1})`` is its own tensor (``bootstrap_value``), not ``value``
shifted by one, so an episode's end inside a chunk is exact:

- termination at ``t``: ``discount_t = 0``, no bootstrap and no trace from ``t + 1``;
- truncation at ``t``: ``discount_t = gamma`` bootstraps from the final observation's value,
  ``cut_t`` stops the trace so nothing of the next episode flows into ``t``;
- chunk end (``t = T - 1``): bootstraps from the last next state's value, no trace beyond.

``rho_bar`` sets the fixed point: the value of a policy between ``mu`` (``rho_bar -> 0``) and
``pi`` (``rho_bar = inf``). ``c_bar`` and ``lam`` shorten the trace (lower variance, slower
contraction) without moving the fixed point. On-policy with ``rho_bar = c_bar = 1``, ``lam = 1``
gives the n-step return to the chunk's end and ``lam < 1`` gives GAE(lambda).
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class VTrace:
    """V-trace's outputs, all ``[B, T]`` and detached.

    Attributes:
        vs: The value targets ``v_s``.
        pg_advantage: ``min(rho_bar_pg, rho_t) * (r_t + discount_t * v_next_t - V(x_t))``.
        rho: The unclipped importance ratios ``pi / mu``, for diagnostics.
    """

    vs: torch.Tensor
    pg_advantage: torch.Tensor
    rho: torch.Tensor


@torch.no_grad()
def vtrace(
    *,
    behaviour_log_prob: torch.Tensor,
    target_log_prob: torch.Tensor,
    reward: torch.Tensor,
    value: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discount: torch.Tensor,
    cut: torch.Tensor,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    rho_bar_pg: float | None = None,
    lam: float = 1.0,
) -> VTrace:
    """Computes V-trace value targets and policy-gradient advantages over ``[B, T]`` chunks.

    Keyword Args:
        behaviour_log_prob: ``log mu(a_t | x_t)``, stored by the collector.
        target_log_prob: ``log pi(a_t | x_t)`` under the learner's current policy.
        reward: ``r_t``.
        value: ``V(x_t)`` under the learner's current value function.
        bootstrap_value: ``V(x_{t+1})``, the value of step ``t``'s next state (the final
            observation at a truncation).
        discount: ``gamma * (1 - terminated_t)``; may vary per step.
        cut: Whether the episode ended at step ``t`` (terminated or truncated).
        rho_bar: Clip of the ratios in the value targets' TD errors.
        c_bar: Clip of the ratios in the trace.
        rho_bar_pg: Clip of the ratios in the advantage; ``rho_bar`` when ``None``.
        lam: Trace decay ``lambda`` multiplying each ``c_t``.

    Returns:
        A ``VTrace`` of ``vs``, ``pg_advantage`` and ``rho``.

    Raises:
        ValueError: When an argument is not ``[B, T]`` with ``value``'s shape.

    Examples:
        >>> zeros, ones = torch.zeros(1, 3), torch.ones(1, 3)
        >>> out = vtrace(
        ...     behaviour_log_prob=zeros, target_log_prob=zeros, reward=ones, value=zeros,
        ...     bootstrap_value=zeros, discount=0.5 * ones, cut=torch.zeros(1, 3, dtype=torch.bool),
        ... )
        >>> out.vs
        tensor([[1.7500, 1.5000, 1.0000]])
    """
    tensors = {
        "behaviour_log_prob": behaviour_log_prob,
        "target_log_prob": target_log_prob,
        "reward": reward,
        "value": value,
        "bootstrap_value": bootstrap_value,
        "discount": discount,
        "cut": cut,
    }
    if value.dim() != 2:
        raise ValueError(f"value must be [B, T], got shape {tuple(value.shape)}")
    for name, tensor in tensors.items():
        if tensor.shape != value.shape:
            raise ValueError(
                f"{name} must have value's shape {tuple(value.shape)}, got {tuple(tensor.shape)}"
            )
    rho_bar_pg = rho_bar if rho_bar_pg is None else rho_bar_pg
    dtype = value.dtype
    rho = (target_log_prob - behaviour_log_prob).exp().to(dtype)
    reward, bootstrap_value, discount = (t.to(dtype) for t in (reward, bootstrap_value, discount))
    continues = ~cut.bool()  # step t + 1 is in step t's episode

    delta = rho.clamp(max=rho_bar) * (reward + discount * bootstrap_value - value)
    trace = discount * lam * rho.clamp(max=c_bar) * continues
    vs_minus_value = torch.empty_like(value)
    carry = torch.zeros_like(value[:, 0])
    for t in reversed(range(value.shape[1])):
        carry = delta[:, t] + trace[:, t] * carry
        vs_minus_value[:, t] = carry
    vs = value + vs_minus_value

    # v_{t+1} where step t + 1 continues the episode inside the chunk, else V(x_{t+1}).
    vs_next = torch.cat([vs[:, 1:], bootstrap_value[:, -1:]], dim=1)
    vs_next = torch.where(continues, vs_next, bootstrap_value)
    pg_advantage = rho.clamp(max=rho_bar_pg) * (reward + discount * vs_next - value)
    return VTrace(vs=vs, pg_advantage=pg_advantage, rho=rho)
