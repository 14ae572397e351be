"""Mixers: the team value ``Q_tot`` from the agents' chosen Q-values (VDN, QMIX).

* :class:`VDNMixer` (Sunehag et al., 2018): ``Q_tot = sum_i Q_i``.
* :class:`QMixer` (Rashid et al., 2018): a two-layer mixing network whose weights come from
  hypernetworks on the global state ``s`` and are made non-negative with ``abs``, so
  ``dQ_tot / dQ_i >= 0`` for every agent (monotonic: each agent's greedy action is the team's)::

      s      = layer_norm(state)
      hidden = elu(Q @ |W_1(s)| + b_1(s))          W_1(s): [n_agents, embed]
      Q_tot  = hidden @ |W_2(s)| + V(s)            W_2(s): [embed, 1], V: state -> ReLU -> 1

The hypernetworks see the state layer-normalized (no learned scale): MPE's positions are
unbounded, and on raw states the hypernetworks' outputs and gradients grew until Spread runs
collapsed; normalized, the gradient norm stayed steady (figures in ``docs/benchmarks.md``). The
mixer stays monotonic in every agent's Q: only the inputs of the hypernetworks change.

Both map ``q`` ``[batch, n_agents]`` (and ``state`` ``[batch, state_dim]``) to ``[batch]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from learner.algorithms.marl import MIXERS


class VDNMixer(nn.Module):
    """Value decomposition networks: the team value is the sum of the agents' values."""

    def forward(self, q: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """``Q_tot = sum_i q_i`` over the last (agent) dimension."""
        return q.sum(dim=-1)


def _hypernet(state_dim: int, hidden: int, out: int) -> nn.Module:
    if hidden == 0:
        return nn.Linear(state_dim, out)
    return nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, out))


class QMixer(nn.Module):
    """QMIX's monotonic mixing network conditioned on the global state.

    Args:
        n_agents: Agents mixed.
        state_dim: Size of the global state.

    Keyword Args:
        embed_dim: Width of the mixing layer.
        hypernet_hidden: Hidden width of the weight hypernetworks (0: one linear layer).

    Examples:
        >>> mixer = QMixer(3, 8)
        >>> mixer(torch.zeros(5, 3), torch.zeros(5, 8)).shape
        torch.Size([5])
    """

    def __init__(
        self, n_agents: int, state_dim: int, *, embed_dim: int = 32, hypernet_hidden: int = 64
    ) -> None:
        super().__init__()
        if state_dim < 1:
            raise ValueError("state_dim: QMIX conditions on a global state, got none")
        self.n_agents = n_agents
        self.embed_dim = embed_dim
        self.hyper_w1 = _hypernet(state_dim, hypernet_hidden, n_agents * embed_dim)
        self.hyper_b1 = nn.Linear(state_dim, embed_dim)
        self.hyper_w2 = _hypernet(state_dim, hypernet_hidden, embed_dim)
        self.value = nn.Sequential(
            nn.Linear(state_dim, embed_dim), nn.ReLU(), nn.Linear(embed_dim, 1)
        )

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``Q_tot`` ``[batch]`` from ``q`` ``[batch, n_agents]`` and ``state``."""
        batch = q.shape[0]
        state = F.layer_norm(state, state.shape[-1:])  # see the module docstring
        w1 = self.hyper_w1(state).abs().view(batch, self.n_agents, self.embed_dim)
        b1 = self.hyper_b1(state).view(batch, 1, self.embed_dim)
        hidden = F.elu(torch.bmm(q.unsqueeze(1), w1) + b1)  # [batch, 1, embed]
        w2 = self.hyper_w2(state).abs().view(batch, self.embed_dim, 1)
        q_tot = torch.bmm(hidden, w2).view(batch) + self.value(state).view(batch)
        return q_tot


def make_mixer(
    name: str, n_agents: int, state_dim: int, *, embed_dim: int = 32, hypernet_hidden: int = 64
) -> nn.Module | None:
    """The mixer named ``name`` (``none``: None, independent learners).

    Raises:
        ValueError: Naming ``mixer`` if unknown, or if ``qmix`` has no state to condition on.
    """
    if name == "none":
        return None
    if name == "vdn":
        return VDNMixer()
    if name == "qmix":
        if state_dim < 1:
            raise ValueError(
                "mixer: qmix conditions on the global state, and the run stores none "
                "(collector.global_state: none)"
            )
        return QMixer(n_agents, state_dim, embed_dim=embed_dim, hypernet_hidden=hypernet_hidden)
    raise ValueError(f"mixer: must be one of {MIXERS}, got {name!r}")
