"""Cooperative multi-agent Q-learning: IQL, VDN and QMIX over one parameter-shared agent network.

Independent Q-learning (Tan, 1993) trains each agent's Q on the team reward; VDN (Sunehag et
al., 2018) and QMIX (Rashid et al., 2018) train a mix of the agents' Q-values on it instead
(``learner.losses.mixers``), with double Q (van Hasselt et al., 2016) and target copies of both
the agent network and the mixer.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from collector.networks.distributions import masked_logits
from learner.losses.common import follow
from learner.losses.mixers import make_mixer


class MultiAgentQLoss(nn.Module):
    """Team Q-learning over a shared agent network, with an optional mixer.

    A batch holds agent fields ``observation``, ``next_observation`` ``[B, n_agents, ...]`` and
    ``action`` ``[B, n_agents]``, and team fields ``reward``, ``terminated``,
    ``n_step_discount`` ``[B]`` and ``state``, ``next_state`` ``[B, state_dim]``::

        q_i         = Q(o_i)[a_i]
        a'_i        = argmax_a Q(o'_i)                        # double Q; Q_target if not double
        q'_i        = Q_target(o'_i)[a'_i]
        # mixer none (IQL): one TD error per agent, all on the team reward
        target_i    = r + discount * (1 - terminated) * q'_i
        loss_q      = mean_{b, i} weight_b * (q_i - target_i)^2
        # mixer vdn or qmix
        target      = r + discount * (1 - terminated) * Mix_target(q', s')
        loss_q      = mean_b weight_b * (Mix(q, s) - target)^2

    ``discount`` is the batch's ``n_step_discount`` (``gamma`` if absent), ``weight`` its
    importance weight (prioritized replay; 1 if absent). With action masks
    (``collector.action_mask_key``) the batch carries ``next_action_mask``
    ``[B, n_agents, n_actions]``: each agent's ``a'_i`` is its best allowed next action, so
    neither the per-agent targets nor the mixed one ever take a forbidden action's Q.
    Truncations bootstrap. The squared error follows the QMIX paper (gradients are clipped by
    the stepper's ``max_grad_norm``).

    Args:
        agent_network: The shared agent network (``collector.networks.agents.AgentQNetwork``), the
            one published to collectors.

    Keyword Args:
        mixer: ``none``, ``vdn`` or ``qmix``.
        gamma: Discount factor.
        double_dqn: Select next actions with the online agent network.
        embed_dim: QMIX mixing width.
        hypernet_hidden: QMIX hypernetworks' hidden width.
    """

    def __init__(
        self,
        agent_network: Any,
        *,
        mixer: str = "qmix",
        gamma: float = 0.99,
        double_dqn: bool = True,
        embed_dim: int = 32,
        hypernet_hidden: int = 64,
    ) -> None:
        super().__init__()
        self.agent_network = agent_network
        self.mixer = make_mixer(
            mixer,
            agent_network.n_agents,
            agent_network.state_dim,
            embed_dim=embed_dim,
            hypernet_hidden=hypernet_hidden,
        )
        self.target_agent_network = copy.deepcopy(agent_network).requires_grad_(False)
        self.target_mixer = (
            None if self.mixer is None else copy.deepcopy(self.mixer).requires_grad_(False)
        )
        self.gamma = gamma
        self.double_dqn = double_dqn

    def _mix(self, mixer: nn.Module, q: torch.Tensor, batch: TensorDict, key: str):
        state = batch.get(key, None)
        return mixer(q, None if state is None else state.to(q.dtype))

    def forward(self, batch: TensorDict) -> TensorDict:
        """Returns ``loss_q``, and ``q_mean``, ``q_tot_mean``, ``td_error`` (per item)."""
        action = batch["action"].long()  # [B, n_agents]
        q_all = self.agent_network(batch["observation"])
        q = q_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_obs = batch["next_observation"]
            next_target = self.target_agent_network(next_obs)
            chooser = self.agent_network(next_obs) if self.double_dqn else next_target
            chooser = masked_logits(chooser, batch.get("next_action_mask", None))
            next_action = chooser.argmax(dim=-1, keepdim=True)
            next_q = next_target.gather(-1, next_action).squeeze(-1)  # [B, n_agents]
            reward = batch["reward"].to(q.dtype)
            not_done = 1.0 - batch["terminated"].to(q.dtype)
            discount = batch.get("n_step_discount", None)
            discount = self.gamma if discount is None else discount.to(q.dtype)
            if self.mixer is None:
                next_value = next_q
                reward, not_done = reward.unsqueeze(-1), not_done.unsqueeze(-1)
                if not isinstance(discount, float):
                    discount = discount.unsqueeze(-1)
            else:
                assert self.target_mixer is not None  # a copy of the mixer
                next_value = self._mix(self.target_mixer, next_q, batch, "next_state")
            target = reward + discount * not_done * next_value
        value = q if self.mixer is None else self._mix(self.mixer, q, batch, "state")
        team_value = q.sum(dim=-1) if self.mixer is None else value
        squared = (value - target).pow(2)
        td_error = (target - value).detach()
        if self.mixer is None:  # per agent: average over agents for the item's error
            squared, td_error = squared.mean(dim=-1), td_error.abs().mean(dim=-1)
        weight = batch.get("weight", None)
        loss = squared.mean() if weight is None else (weight.to(q.dtype) * squared).mean()
        return TensorDict(
            {
                "loss_q": loss,
                "q_mean": q.detach().mean(),
                "q_tot_mean": team_value.detach().mean(),
                "td_error": td_error,
            },
            batch_size=[],
        )

    @torch.no_grad()
    def update_target(self, tau: float = 1.0) -> None:
        """Copies (``tau=1``) or Polyak-averages the agent network and mixer into their targets."""
        pairs = [(self.target_agent_network, self.agent_network)]
        if self.mixer is not None:
            assert self.target_mixer is not None  # a copy of the mixer
            pairs.append((self.target_mixer, self.mixer))
        for target_module, online_module in pairs:
            follow(target_module, online_module, tau)


def marl_loss(policy_network: nn.Module, config) -> MultiAgentQLoss:
    """The built-in ``loss: marl`` factory (mixer and its sizes from ``learner.marl``)."""
    options = config.marl
    return MultiAgentQLoss(
        policy_network,
        mixer=options.mixer,
        gamma=config.gamma,
        double_dqn=config.double_dqn,
        embed_dim=options.mixing_embed_dim,
        hypernet_hidden=options.hypernet_hidden,
    )
