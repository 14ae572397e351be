"""APPO: PPO's clipped surrogate on V-trace advantages with an old (target) policy.

As in RLlib's APPO after IMPACT (Luo et al., 2020): a copy of the actor-critic, the *old*
policy pi_old, is refreshed every ``learner.target_update_interval`` optimizer steps
(``update_target``). V-trace (``learner.vtrace``) corrects the behaviour policy's lag with
pi_old as its target policy and the current value function; the surrogate clips the ratio of
the current policy to pi_old, reached through the behaviour policy mu with IMPACT's clipped
importance weight::

    V_t, V'_t      = V(x_t), V(x_{t+1})                        (current critic)
    v, A           = vtrace(log mu, log pi_old, r, V, V', discount, cut; rho_bar, c_bar)
    w_t            = clip(mu(a_t | x_t) / pi_old(a_t | x_t), 0, is_clip)
    ratio_t        = w_t * pi(a_t | x_t) / mu(a_t | x_t)       (~ pi / pi_old)
    loss_objective = -mean_valid(min(A_t * ratio_t, A_t * clip(ratio_t, 1 - eps, 1 + eps)))
    loss_critic    = vf_coef * 0.5 * mean_valid((V_t - v_t)^2)
    loss_entropy   = -ent_coef * mean_valid(H[pi(. | x_t)])

``mean_valid`` averages over the steps with ``valid`` set (the envs' auto-reset steps are not
transitions). Diagnostics as ``learner.losses.impala`` plus ``clip_fraction`` and
``approx_kl`` (Schulman's k3 estimator of KL(pi_old || pi)).

Minibatches of chunks or of steps (``learner.vtrace.minibatch_unit``). With ``chunks`` (the
default) each minibatch is whole chunks and V-trace runs on it with the critic as it is at that
optimizer step. With ``steps`` the round's learner calls :meth:`APPOLoss.prepare_pass` before
each pass: V-trace with the critic and pi_old as they are then, over the rank's whole share of
the batch (advantages standardized over all its valid steps), flattened to one item per step,
and reused by the later passes until pi_old is refreshed; minibatches are then steps drawn
across every chunk, as PPO's are drawn across its batch, and the loss above reads ``v`` and
``A`` from them instead of recomputing V-trace. Each minibatch then runs the network on its
steps only, not on the ``T + 1`` states of a chunk.
"""

from __future__ import annotations

import copy

import torch
from tensordict import TensorDict
from torch import nn

from collector.sequences import STATE_COLUMN
from learner.losses.chunks import (
    chunk_vtrace,
    diagnostics,
    evaluate_chunks,
    masked_mean,
    normalized,
)
from learner.losses.common import evaluate_actions, follow
from learner.vtrace import VTrace

PREPARED = "value_target"  # a column only prepare_pass's step items have


class APPOLoss(nn.Module):
    """The clipped surrogate on V-trace advantages (see the module docstring).

    Args:
        actor_critic: ``collector.networks.actor_critic.ActorCritic`` (the published policy).

    Keyword Args:
        gamma: Discount factor.
        clip_epsilon: Ratio clipping ``eps``.
        vf_coef: Weight of the value loss.
        ent_coef: Weight of the entropy bonus.
        rho_bar: V-trace's truncation of the importance weights (rho bar).
        c_bar: V-trace's truncation of the trace coefficients (c bar).
        rho_bar_pg: Truncation of the advantage's importance weight (None: ``rho_bar``).
        vtrace_lambda: V-trace's lambda.
        is_clip: Upper clip of IMPACT's importance weight ``mu / pi_old``.
        normalize_advantage: Standardize the V-trace advantages over each minibatch's valid
            steps (``chunks.normalized``).
    """

    def __init__(
        self,
        actor_critic: nn.Module,
        *,
        gamma: float = 0.99,
        clip_epsilon: float = 0.2,
        vf_coef: float = 0.5,
        ent_coef: float = 0.01,
        rho_bar: float = 1.0,
        c_bar: float = 1.0,
        rho_bar_pg: float | None = None,
        vtrace_lambda: float = 1.0,
        is_clip: float = 2.0,
        normalize_advantage: bool = False,
    ) -> None:
        super().__init__()
        self.actor_critic = actor_critic
        self.old_actor_critic = copy.deepcopy(actor_critic).requires_grad_(False)
        self.gamma = gamma
        self.clip_epsilon = clip_epsilon
        self.vf_coef = vf_coef
        self.ent_coef = ent_coef
        self.rho_bar, self.c_bar, self.rho_bar_pg = rho_bar, c_bar, rho_bar_pg
        self.vtrace_lambda = vtrace_lambda
        self.is_clip = is_clip
        self.normalize_advantage = normalize_advantage
        # Set by update_target(tau=1): pi_old is a copy of the actor-critic until the next
        # optimizer step (prepare_pass then evaluates one network, not two). Unknown at first (a
        # DDP rank's parameters are broadcast from rank 0) and after load_state_dict.
        self.old_is_current = False
        self.target_updates = 0  # pi_old refreshes, to know when prepared items are stale
        self._prepared: tuple[TensorDict, int, TensorDict] | None = None

    def load_state_dict(self, *args, **kwargs):
        """``nn.Module.load_state_dict``; pi_old is then no longer known to be a copy."""
        self.old_is_current, self._prepared = False, None
        return super().load_state_dict(*args, **kwargs)

    def vtrace_options(self) -> dict:
        """The keyword arguments of ``chunk_vtrace``."""
        return {
            "gamma": self.gamma,
            "rho_bar": self.rho_bar,
            "c_bar": self.c_bar,
            "rho_bar_pg": self.rho_bar_pg,
            "lam": self.vtrace_lambda,
        }

    @torch.no_grad()
    def prepare_pass(self, batch: TensorDict, slice_size: int = 8) -> TensorDict:
        """One pass's step items: V-trace over the whole chunk batch, flattened to steps.

        The items are computed again only when pi_old was refreshed since the last call on the
        same batch: between refreshes a round's later passes reuse them (PPO's advantages and
        value targets are likewise fixed for a batch's epochs), so with the old policy
        refreshed once per round (``learner.target_update_interval`` = the round's optimizer
        steps) the round evaluates the network once, not once per pass.

        Args:
            batch: A chunk batch ``[B]`` (``learner.losses.chunks``).
            slice_size: Chunks evaluated at once (bounds the memory of the no-gradient passes).

        Returns:
            ``[B x T]`` items of ``observation`` (``x_t``), ``action``, ``log_prob`` (the
            behaviour policy's), ``old_log_prob``, ``value_target`` (``v_t``), ``advantage``
            (standardized over the batch's valid steps with ``normalize_advantage``),
            ``valid`` and, when the chunks have one, ``action_mask``.

        Raises:
            ValueError: For chunks of a recurrent policy (their steps need the chunk's state).
        """
        if batch.get(STATE_COLUMN, None) is not None:
            raise ValueError("learner.vtrace.minibatch_unit: steps needs a feed-forward policy")
        cached = self._prepared
        if cached is not None and cached[0] is batch and cached[1] == self.target_updates:
            return cached[2]
        parts = []
        for start in range(0, len(batch), slice_size):
            part = batch[start : start + slice_size]
            log_prob, _, value, next_value = evaluate_chunks(self.actor_critic, part)
            if not self.old_is_current:  # else pi_old's log-probs are these
                log_prob = evaluate_chunks(self.old_actor_critic, part)[0]
            old_log_prob = log_prob
            targets = chunk_vtrace(part, old_log_prob, value, next_value, **self.vtrace_options())
            parts.append((old_log_prob, targets.vs, targets.pg_advantage))
        old_log_prob, value_target, advantage = (torch.cat(p) for p in zip(*parts, strict=True))
        mask = batch["valid"].to(value_target.dtype)
        if self.normalize_advantage:
            advantage = normalized(advantage, mask)
        steps = batch["action"].shape[1]
        columns = {
            "observation": batch["observation"][:, :steps],
            "action": batch["action"],
            "log_prob": batch["log_prob"],
            "old_log_prob": old_log_prob,
            PREPARED: value_target,
            "advantage": advantage,
            "valid": batch["valid"],
        }
        mask_column = batch.get("action_mask", None)
        if mask_column is not None:
            columns["action_mask"] = mask_column
        items = TensorDict(columns, batch_size=[len(batch), steps], device=batch.device)
        items = items.reshape(-1)
        self._prepared = (batch, self.target_updates, items)
        return items

    def forward(self, batch: TensorDict) -> TensorDict:
        """Returns ``loss_objective``, ``loss_critic``, ``loss_entropy`` and diagnostics."""
        self.old_is_current = False  # an optimizer step follows
        prepared = batch.get(PREPARED, None) is not None  # step items of prepare_pass
        if prepared:
            log_prob, entropy, value = evaluate_actions(self.actor_critic, batch)
            old_log_prob, advantage = batch["old_log_prob"], batch["advantage"]
            value_target = batch[PREPARED]
            rho = (old_log_prob - batch["log_prob"].to(log_prob.dtype)).exp()
            targets = VTrace(vs=value_target, pg_advantage=advantage, rho=rho)
        else:
            log_prob, entropy, value, next_value = evaluate_chunks(self.actor_critic, batch)
            with torch.no_grad():
                old_log_prob = evaluate_chunks(self.old_actor_critic, batch)[0]
            options = self.vtrace_options()
            targets = chunk_vtrace(batch, old_log_prob, value, next_value, **options)
            advantage = targets.pg_advantage
        behaviour = batch["log_prob"].to(log_prob.dtype)
        weight = (behaviour - old_log_prob).exp().clamp(0.0, self.is_clip)
        ratio = weight * (log_prob - behaviour).exp()
        eps = self.clip_epsilon
        mask = batch["valid"].to(value.dtype)
        if self.normalize_advantage and not prepared:
            advantage = normalized(advantage, mask)
        surrogate = torch.min(advantage * ratio, advantage * ratio.clamp(1 - eps, 1 + eps))
        entropy = masked_mean(entropy, mask)
        with torch.no_grad():
            log_ratio = log_prob - old_log_prob
            approx_kl = masked_mean((log_ratio.exp() - 1) - log_ratio, mask)
            clip_fraction = masked_mean(((ratio - 1).abs() > eps).to(mask.dtype), mask)
        return TensorDict(
            {
                "loss_objective": -masked_mean(surrogate, mask),
                "loss_critic": self.vf_coef * 0.5 * masked_mean((value - targets.vs) ** 2, mask),
                "loss_entropy": -self.ent_coef * entropy,
                "approx_kl": approx_kl,
                "clip_fraction": clip_fraction,
                **diagnostics(targets, value, entropy, mask, self.rho_bar),
            },
            batch_size=[],
        )

    @torch.no_grad()
    def update_target(self, tau: float = 1.0) -> None:
        """Copies (``tau=1``) or Polyak-averages the current actor-critic into pi_old."""
        follow(self.old_actor_critic, self.actor_critic, tau)
        self.old_is_current = tau >= 1.0
        self.target_updates += 1


def appo_loss(policy_network: nn.Module, config) -> APPOLoss:
    """The built-in ``loss: appo`` factory (options from ``config.vtrace``)."""
    options = config.vtrace
    return APPOLoss(
        policy_network,
        gamma=config.gamma,
        clip_epsilon=options.clip_epsilon,
        vf_coef=options.vf_coef,
        ent_coef=options.ent_coef,
        rho_bar=options.rho_bar,
        c_bar=options.c_bar,
        rho_bar_pg=options.rho_bar_pg,
        vtrace_lambda=options.vtrace_lambda,
        is_clip=options.is_clip,
        normalize_advantage=options.normalize_advantage,
    )
