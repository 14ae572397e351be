"""The deterministic forward of each network family: observation to action scores or action.

:class:`PolicyHead` wraps a trained network in the one forward that ``Policy.act`` takes its
greedy actions from and that ``services.export`` writes, so the exported file and ``act`` agree
by construction:

* ``q`` (DQN): Q-values ``[B, n_actions]``; the action is their argmax.
* ``actor_critic`` (PPO, A2C, REINFORCE): for discrete actions the logits ``[B, n_actions]``
  (the mode is their argmax); for a ``Box`` the mean ``[B, action_dim]`` clipped to the bounds;
  for ``MultiDiscrete(nvec)`` the concatenated logits ``[B, sum(nvec)]`` (the mode: each
  dimension's argmax), for ``MultiBinary(n)`` the bits' logits (the mode: the positive ones).

* ``squashed`` (SAC): the mean action ``center + half_range * tanh(mean)`` in the bounds.
* ``agents`` (IQL, VDN, QMIX): per-agent Q-values ``[B, n_agents, n_actions]`` from the
  agents' observations ``[B, n_agents, width]`` (the network appends the agent ids).
* ``recurrent_q``, ``recurrent_actor_critic``, ``recurrent_squashed`` (``learner.recurrent``):
  what ``q``, ``actor_critic`` and ``squashed`` give, from one step's observations
  ``[B, *obs_shape]`` and the state before the step ``[B, state_size]``;
  ``forward(observation, state)`` returns the scores (or action) and the state after the step,
  ``next_state`` (the network runs a sequence of length 1).

With ``collector.action_mask_key`` :class:`MaskedHead` (:class:`RecurrentMaskedHead` for the
recurrent families) takes the mask as its last input.

Examples:
    >>> import gymnasium as gym
    >>> from collector.networks.q_mlp import ModelSpec
    >>> head = PolicyHead(ModelSpec(4, 2).build(), "q", gym.spaces.Discrete(2))
    >>> head.output, head.discrete, head(torch.zeros(3, 4)).shape
    ('q_values', True, torch.Size([3, 2]))
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from collector.networks.distributions import masked_logits

OUTPUTS = {
    "q": "q_values",
    "actor_critic": "logits",
    "squashed": "action",
    "agents": "q_values",
    "recurrent_q": "q_values",
    "recurrent_actor_critic": "logits",
    "recurrent_squashed": "action",
}
RECURRENT_FAMILIES = ("recurrent_q", "recurrent_actor_critic", "recurrent_squashed")


class PolicyHead(nn.Module):
    """A network's deterministic forward (see the module docstring).

    Args:
        network: The trained network of the family.
        family: ``q``, ``actor_critic``, ``squashed``, ``agents``, ``recurrent_q``,
            ``recurrent_actor_critic`` or ``recurrent_squashed``.
        action_space: The env's action space (bounds of a ``Box``; discrete or not).

    Attributes:
        output: What ``forward`` returns: ``q_values``, ``logits`` or ``action`` (recurrent
            families: that and ``next_state``).
        discrete: Whether actions are the argmax of the output over its last axis.
        recurrent: Whether ``forward`` takes and returns a state.
    """

    def __init__(self, network: nn.Module, family: str, action_space: gym.Space) -> None:
        super().__init__()
        if family not in OUTPUTS:
            raise ValueError(f"family: must be one of {tuple(OUTPUTS)}, got {family!r}")
        self.network = network
        self.family = family
        self.recurrent = family in RECURRENT_FAMILIES
        base = family.removeprefix("recurrent_")
        factorised = gym.spaces.MultiDiscrete | gym.spaces.MultiBinary
        self.factorised = base == "actor_critic" and isinstance(action_space, factorised)
        self.nvec = (
            tuple(int(n) for n in action_space.nvec)
            if self.factorised and isinstance(action_space, gym.spaces.MultiDiscrete)
            else None
        )
        self.discrete = not self.factorised and isinstance(
            action_space, gym.spaces.Discrete | gym.spaces.MultiDiscrete
        )
        scores = self.discrete or self.factorised or base != "actor_critic"
        self.output = OUTPUTS[family] if scores else "action"
        self.clipped = base == "actor_critic" and not scores
        if self.clipped:
            low = torch.as_tensor(np.asarray(action_space.low, np.float32))
            high = torch.as_tensor(np.asarray(action_space.high, np.float32))
            self.register_buffer("low", low, persistent=False)
            self.register_buffer("high", high, persistent=False)

    def forward(self, observation, state: torch.Tensor | None = None):
        """Action scores (``q_values``, ``logits``) or the action, batched.

        Args:
            observation: ``[B, *obs_shape]`` (or a mapping of such, structured observations).
            state: The recurrent families' state before the step, ``[B, state_size]``
                (required for them, ignored by the others).

        Returns:
            The scores or action; for the recurrent families ``(scores or action,
            next_state)``.
        """
        if self.family == "squashed":
            return self.network.mode(observation)
        if self.recurrent:
            if isinstance(observation, Mapping):
                steps = {key: value.unsqueeze(1) for key, value in observation.items()}
            else:
                steps = observation.unsqueeze(1)
            out, *_, next_state = self.network(steps, state)
            if self.family == "recurrent_squashed":  # the mean before squashing
                return self.network.mode(out[:, 0]), next_state
            return self._clip(out[:, 0]), next_state
        if self.family == "actor_critic":
            return self._clip(self.network(observation)[0])
        return self.network(observation)

    def _clip(self, out: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.maximum(out, self.low), self.high) if self.clipped else out

    def actions(self, output: torch.Tensor) -> torch.Tensor:
        """The deterministic actions of :meth:`forward`'s output."""
        if self.nvec is not None:  # MultiDiscrete: each dimension's argmax
            return torch.stack([p.argmax(-1) for p in torch.split(output, self.nvec, -1)], -1)
        if self.factorised:  # MultiBinary: the bits more likely set than not
            return (output > 0).long()
        return output.argmax(dim=-1) if self.discrete else output


class MaskedHead(nn.Module):
    """A :class:`PolicyHead` taking the action mask too: ``forward(observation, action_mask)``.

    The scores of forbidden actions (``action_mask`` 0 or False) are the dtype's minimum, so the
    argmax is an allowed action (``collector.networks.distributions.masked_logits``); what an
    exported policy of a masked run computes.
    """

    def __init__(self, head: PolicyHead) -> None:
        super().__init__()
        self.head = head

    def forward(self, observation: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        """The masked action scores, batched."""
        return masked_logits(self.head(observation), action_mask)


class RecurrentMaskedHead(nn.Module):
    """:class:`MaskedHead` for a recurrent family: ``forward(observation, state, action_mask)``.

    Returns ``(masked scores, next_state)``: what an exported recurrent policy of a masked run
    computes.
    """

    def __init__(self, head: PolicyHead) -> None:
        super().__init__()
        self.head = head

    def forward(
        self, observation: torch.Tensor, state: torch.Tensor, action_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The masked action scores and the state after the step, batched."""
        scores, next_state = self.head(observation, state)
        return masked_logits(scores, action_mask), next_state
