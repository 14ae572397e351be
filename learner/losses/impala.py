"""IMPALA's V-trace actor-critic loss (Espeholt et al., 2018, section 4.2).

A batch holds ``B`` trajectory chunks of ``T`` steps (``collector.chunks``): ``observation``
``[B, T + 1, ...]`` and per step ``action``, the behaviour policy's ``log_prob`` (mu),
``reward``, ``terminated``, ``truncated`` and ``valid`` (False on the envs' auto-reset steps).
The learner runs its current actor-critic once over all ``T + 1`` states and computes V-trace
(``learner.vtrace``) with its own value function::

    V_t        = V(x_t),  V'_t = V(x_{t+1})                  (x_{t+1}: the final state at an end)
    discount_t = gamma * (1 - terminated_t);  cut_t = terminated_t or truncated_t
    v_s, A_s   = vtrace(log mu, log pi, r, V, V', discount, cut; rho_bar, c_bar, lambda)
    loss_objective = -sum_t valid_t * A_t * log pi(a_t | x_t) / sum_t valid_t
    loss_critic    = vf_coef * 0.5 * sum_t valid_t * (V_t - v_t)^2 / sum_t valid_t
    loss_entropy   = -ent_coef * sum_t valid_t * H[pi(. | x_t)] / sum_t valid_t

``v_s`` and ``A_s`` are targets (no gradient flows through them). Diagnostics: ``rho_mean``
(mean importance ratio pi/mu over valid steps), ``rho_clipped`` (share above ``rho_bar``),
``entropy``, ``value_mean``.
"""

from __future__ import annotations

from tensordict import TensorDict
from torch import nn

from learner.losses.chunks import (
    chunk_vtrace,
    diagnostics,
    evaluate_chunks,
    masked_mean,
    normalized,
)


class IMPALALoss(nn.Module):
    """V-trace policy gradient, value and entropy terms (see the module docstring).

    Args:
        actor_critic: ``collector.networks.actor_critic.ActorCritic`` (the published policy).

    Keyword Args:
        gamma: Discount factor.
        vf_coef: Weight of the value loss.
        ent_coef: Weight of the entropy bonus.
        rho_bar: V-trace's truncation of the importance weights in ``delta`` (rho bar).
        c_bar: V-trace's truncation of the trace coefficients (c bar).
        rho_bar_pg: Truncation of the policy-gradient importance weight (None: ``rho_bar``).
        vtrace_lambda: V-trace's lambda (1: the paper's estimator).
        normalize_advantage: Standardize the advantages over each batch's valid steps.
    """

    def __init__(
        self,
        actor_critic: nn.Module,
        *,
        gamma: float = 0.99,
        vf_coef: float = 0.5,
        ent_coef: float = 0.01,
        rho_bar: float = 1.0,
        c_bar: float = 1.0,
        rho_bar_pg: float | None = None,
        vtrace_lambda: float = 1.0,
        normalize_advantage: bool = False,
    ) -> None:
        super().__init__()
        self.actor_critic = actor_critic
        self.gamma = gamma
        self.vf_coef = vf_coef
        self.ent_coef = ent_coef
        self.rho_bar, self.c_bar, self.rho_bar_pg = rho_bar, c_bar, rho_bar_pg
        self.vtrace_lambda = vtrace_lambda
        self.normalize_advantage = normalize_advantage

    def vtrace_options(self) -> dict:
        """The keyword arguments of ``chunk_vtrace``."""
        return {
            "gamma": self.gamma,
            "rho_bar": self.rho_bar,
            "c_bar": self.c_bar,
            "rho_bar_pg": self.rho_bar_pg,
            "lam": self.vtrace_lambda,
        }

    def forward(self, batch: TensorDict) -> TensorDict:
        """Returns ``loss_objective``, ``loss_critic``, ``loss_entropy`` and diagnostics."""
        log_prob, entropy, value, next_value = evaluate_chunks(self.actor_critic, batch)
        targets = chunk_vtrace(batch, log_prob, value, next_value, **self.vtrace_options())
        mask = batch["valid"].to(value.dtype)
        entropy = masked_mean(entropy, mask)
        advantage = targets.pg_advantage
        if self.normalize_advantage:
            advantage = normalized(advantage, mask)
        return TensorDict(
            {
                "loss_objective": -masked_mean(advantage * log_prob, mask),
                "loss_critic": self.vf_coef * 0.5 * masked_mean((value - targets.vs) ** 2, mask),
                "loss_entropy": -self.ent_coef * entropy,
                **diagnostics(targets, value, entropy, mask, self.rho_bar),
            },
            batch_size=[],
        )


def impala_loss(policy_network: nn.Module, config) -> IMPALALoss:
    """The built-in ``loss: impala`` factory (options from ``config.vtrace``)."""
    options = config.vtrace
    return IMPALALoss(
        policy_network,
        gamma=config.gamma,
        vf_coef=options.vf_coef,
        ent_coef=options.ent_coef,
        rho_bar=options.rho_bar,
        c_bar=options.c_bar,
        rho_bar_pg=options.rho_bar_pg,
        vtrace_lambda=options.vtrace_lambda,
        normalize_advantage=options.normalize_advantage,
    )
