"""Recurrent SAC: soft actor-critic over stored sequences (``sac`` with ``learner.recurrent``).

The network is ``collector.networks.recurrent_squashed.RecurrentSoftActorCritic``: a recurrent
tanh-Gaussian actor ``pi`` and twin recurrent critics ``Q_1, Q_2``, each with its own core; the
loss keeps Polyak-averaged target critics ``Q'_1, Q'_2`` and the temperature
``alpha = exp(log_alpha)``. A batch holds sequences (``collector.sequence_worker``): observations
``o_0 .. o_L``, actions, rewards, ``terminated``, ``valid [B, L]`` (False on padding), the
stored state ``s = (s^pi, s^1, s^2)`` before step 0 and the burn-in length ``b``. Every core
(the target critics' from the online critics' stored state, as R2D2's target network) first
runs the burn-in steps under ``no_grad``, then the rest from the state it reached, detached::

    memories     h_t = pi's core(o_0 .. o_t),  c^i_t = Q_i's core(o_0 .. o_t),
                 c'^i_t = Q'_i's core(o_0 .. o_t)                       t = b .. L
    a'_{t+1} ~ pi(. | h_{t+1})
    y_t          = r_t + gamma (1 - d_t) (min_i Q'_i(c'^i_{t+1}, a'_{t+1})
                                          - alpha log pi(a'_{t+1} | h_{t+1}))
    loss_qvalue  = mean_t w ((Q_1(c^1_t, a_t) - y_t)^2 + (Q_2(c^2_t, a_t) - y_t)^2)
    a~_t ~ pi(. | h_t)                                                   (reparameterized)
    loss_actor   = mean_t (alpha log pi(a~_t | h_t) - min_i Q_i(c^i_t, a~_t))
    loss_alpha   = -mean_t log_alpha (log pi(a~_t | h_t) + target_entropy)

The means run over the valid steps ``t = b .. L-1`` of the batch (padding enters no loss, no
target and no state: the cores pass padded steps unchanged); ``w`` is the item's importance
weight (prioritized replay; 1 otherwise). ``o_{t+1}`` after the last real step is its next
state (the bootstrap of a truncated or cut sequence); ``d_t`` is 1 only on an episode's
termination. The critic's memories in ``loss_actor`` carry no gradient, so the actor's loss
moves the actor alone. The returns are one-step: a sequence's next states are all stored, but
an n-step soft target would need the entropy of every intermediate step under the current
policy; ``collector.n_step`` is 1. The priority of an item is ``mean_t |y_t - min_i Q_i|``.
``target_entropy`` defaults to ``-action_dim``; the three terms are separate methods in update
order (:meth:`SequenceSACLoss.optim_groups`), as in the feed-forward ``learner.losses.sac``.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from learner.losses.common import follow


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` over the ``mask``ed entries (0 when none is).

    Examples:
        >>> masked_mean(torch.tensor([[1.0, 3.0, 100.0]]), torch.tensor([[True, True, False]]))
        tensor(2.)
    """
    return torch.where(mask, x, torch.zeros_like(x)).sum() / mask.sum().clamp(min=1)


class SequenceSACLoss(nn.Module):
    """SAC's critic, actor and temperature losses over sequences (the module docstring's math).

    Args:
        network: ``collector.networks.recurrent_squashed.RecurrentSoftActorCritic`` (the
            published network: actor and online critics).

    Keyword Args:
        gamma: Discount factor.
        init_alpha: Initial temperature.
        learn_alpha: Learn the temperature (else it stays ``init_alpha``).
        target_entropy: Entropy target; None is ``-action_dim``.
    """

    def __init__(
        self,
        network: Any,
        *,
        gamma: float = 0.99,
        init_alpha: float = 1.0,
        learn_alpha: bool = True,
        target_entropy: float | None = None,
    ) -> None:
        super().__init__()
        self.network = network
        self.q1_target = copy.deepcopy(network.q1).requires_grad_(False)
        self.q2_target = copy.deepcopy(network.q2).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)), requires_grad=learn_alpha)
        self.gamma = gamma
        action_dim = network.spec.action_dim
        self.target_entropy = -float(action_dim) if target_entropy is None else target_entropy
        self.find_unused_parameters = True  # each method uses a subset of the parameters

    @property
    def alpha(self) -> torch.Tensor:
        """The temperature ``exp(log_alpha)`` (detached)."""
        return self.log_alpha.detach().exp()

    def unroll(
        self,
        core: Any,
        batch: TensorDict,
        state: torch.Tensor,
        *,
        grad: bool = True,
        exact_state: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One core's memories of ``o_b .. o_L`` ``[B, L + 1 - b, hidden]`` and its state after.

        The burn-in steps run under ``no_grad`` from ``state`` (the stored one); the rest from
        the state they reach, detached, with gradient when ``grad``. The real steps of a stored
        sequence are a prefix (``collector.sequence_worker`` pads its end), and a memory depends
        only on the steps up to it, so the memories of real steps do not depend on the padding:
        by default each part is one fused call of the core over every step (padding included;
        the losses mask what follows the prefix). With ``exact_state`` the padded steps pass the
        state unchanged (``valid``, a slower segmented call), so the returned state is the state
        after each row's last real observation; otherwise it is the state after all the steps.
        A row whose burn-in holds padding has no real learning step, so no loss reads it.
        """
        obs, valid = batch["observation"], batch["valid"].to(torch.bool)
        # o_0 is real; o_{t+1} exists where step t is real (o_E is the bootstrap state).
        obs_valid = (
            torch.cat([torch.ones_like(valid[:, :1]), valid], dim=1) if exact_state else None
        )
        burn_in = burn_in_of(batch)
        if burn_in:
            with torch.no_grad():
                head = None if obs_valid is None else obs_valid[:, :burn_in]
                _, state = core.memories(obs[:, :burn_in], state, valid=head)
        tail = None if obs_valid is None else obs_valid[:, burn_in:]
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            return core.memories(obs[:, burn_in:], state.detach(), valid=tail)

    def _states(self, batch: TensorDict) -> tuple[torch.Tensor, ...]:
        return self.network.split_state(batch["recurrent_state"].to(torch.float32))

    def _policy(self, memories: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized action and its log-probability after each memory."""
        return self.network.sample(*self.network.actor.heads(memories))

    def loss_critic(self, batch: TensorDict) -> TensorDict:
        """``loss_qvalue`` plus ``q_mean`` and the per-item ``td_error`` (prioritized replay)."""
        actor_state, q1_state, q2_state = self._states(batch)
        burn_in = burn_in_of(batch)
        mask = batch["valid"].to(torch.bool)[:, burn_in:]
        action = batch["action"][:, burn_in:].to(torch.float32)
        with torch.no_grad():
            h, _ = self.unroll(self.network.actor, batch, actor_state, grad=False)
            next_action, next_log_prob = self._policy(h[:, 1:])
            c1, _ = self.unroll(self.q1_target, batch, q1_state, grad=False)
            c2, _ = self.unroll(self.q2_target, batch, q2_state, grad=False)
            next_q = torch.min(
                self.q1_target.q(c1[:, 1:], next_action), self.q2_target.q(c2[:, 1:], next_action)
            )
            not_done = 1.0 - batch["terminated"][:, burn_in:].float()
            reward = batch["reward"][:, burn_in:].float()
            target = reward + self.gamma * not_done * (next_q - self.alpha * next_log_prob)
        m1, _ = self.unroll(self.network.q1, batch, q1_state)
        m2, _ = self.unroll(self.network.q2, batch, q2_state)
        q1 = self.network.q1.q(m1[:, :-1], action)
        q2 = self.network.q2.q(m2[:, :-1], action)
        squared = (q1 - target).square() + (q2 - target).square()
        weight = batch.get("weight", None)
        if weight is not None:
            squared = weight.reshape(-1, 1).to(squared.dtype) * squared
        td_abs = torch.where(mask, (target - torch.min(q1, q2)).detach().abs(), 0.0)
        return TensorDict(
            {
                "loss_qvalue": masked_mean(squared, mask),
                "q_mean": masked_mean(q1.detach(), mask),
                "td_error": td_abs.sum(-1) / mask.sum(-1).clamp(min=1),
            },
            batch_size=[],
        )

    def _actor_terms(self, batch: TensorDict, *, grad: bool):
        actor_state, q1_state, q2_state = self._states(batch)
        mask = batch["valid"].to(torch.bool)[:, burn_in_of(batch) :]
        h, _ = self.unroll(self.network.actor, batch, actor_state, grad=grad)
        action, log_prob = self._policy(h[:, :-1])
        return action, log_prob, mask, q1_state, q2_state

    def loss_actor(self, batch: TensorDict) -> TensorDict:
        """``loss_actor`` and the policy's ``entropy`` estimate ``-mean log pi``."""
        action, log_prob, mask, q1_state, q2_state = self._actor_terms(batch, grad=True)
        with torch.no_grad():
            m1, _ = self.unroll(self.network.q1, batch, q1_state, grad=False)
            m2, _ = self.unroll(self.network.q2, batch, q2_state, grad=False)
        q = torch.min(self.network.q1.q(m1[:, :-1], action), self.network.q2.q(m2[:, :-1], action))
        return TensorDict(
            {
                "loss_actor": masked_mean(self.alpha * log_prob - q, mask),
                "entropy": -masked_mean(log_prob.detach(), mask),
            },
            batch_size=[],
        )

    def loss_alpha(self, batch: TensorDict) -> TensorDict:
        """``loss_alpha`` toward the target entropy, and ``alpha``."""
        with torch.no_grad():
            _, log_prob, mask, _, _ = self._actor_terms(batch, grad=False)
        loss = -masked_mean(self.log_alpha * (log_prob + self.target_entropy), mask)
        return TensorDict({"loss_alpha": loss, "alpha": self.alpha}, batch_size=[])

    def optim_groups(self) -> list[tuple[str, list[nn.Parameter]]]:
        """``(method, parameters)`` in update order: critics, actor, temperature."""
        network = self.network
        groups = [
            ("loss_critic", [*network.q1.parameters(), *network.q2.parameters()]),
            ("loss_actor", list(network.actor.parameters())),
        ]
        if self.log_alpha.requires_grad:
            groups.append(("loss_alpha", [self.log_alpha]))
        return groups

    @torch.no_grad()
    def update_target(self, tau: float = 0.005) -> None:
        """Polyak-averages the critics into their targets (``tau = 1`` copies)."""
        follow(self.q1_target, self.network.q1, tau)
        follow(self.q2_target, self.network.q2, tau)


def burn_in_of(batch: TensorDict) -> int:
    """The batch's burn-in steps (every item of a run stores the same; 0 when absent)."""
    stored = batch.get("burn_in", None)
    return 0 if stored is None else int(stored.reshape(-1)[0])


def sac_sequence_loss(policy_network: nn.Module, config) -> SequenceSACLoss:
    """The ``loss: sac`` factory with ``learner.recurrent`` (options from ``config.sac``)."""
    options = config.sac
    return SequenceSACLoss(
        policy_network,
        gamma=config.gamma,
        init_alpha=options.init_alpha,
        learn_alpha=options.learn_alpha,
        target_entropy=options.target_entropy,
    )
