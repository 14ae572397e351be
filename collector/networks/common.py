"""What every network shares: exploration parameters, MLP trunks, the dueling head.

Exploration parameters travel as a small mapping set by the driver's schedule on every rollout
(:func:`exploration`): ``epsilon`` (epsilon-greedy), ``random`` (uniform random actions, e.g.
during ``init_random_frames``), ``deterministic`` (the policy's greedy form: argmax, mode or
mean, for evaluation). A plain float is read as ``{"epsilon": value}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

Explore = float | Mapping[str, Any] | None


def exploration(explore: Explore) -> dict[str, Any]:
    """Normalizes exploration parameters: a float is an epsilon, None is no exploration.

    Examples:
        >>> exploration(0.1), exploration(None), exploration({"random": True})
        ({'epsilon': 0.1}, {}, {'random': True})
    """
    if explore is None:
        return {}
    if isinstance(explore, Mapping):
        return dict(explore)
    return {"epsilon": float(explore)}


def observation_tensor(obs: Any) -> Any:
    """A batch of observations as the network takes it, sharing memory where it can.

    A flat array becomes a float32 tensor (as ever); a mapping of arrays (a structured
    observation, ``collector.envs.spaces``) a dict of tensors keeping their dtypes (the
    multi-input encoder one-hots integers and scales uint8 images itself).

    Examples:
        >>> observation_tensor({"a": np.zeros((2, 3), np.uint8)})["a"].dtype
        torch.uint8
    """
    if isinstance(obs, Mapping):
        return {key: torch.as_tensor(np.asarray(value)) for key, value in obs.items()}
    return torch.as_tensor(obs, dtype=torch.float32)


def mlp_trunk(in_dim: int, hidden_sizes: tuple[int, ...]) -> tuple[nn.Sequential, int]:
    """ReLU hidden layers ``in_dim -> hidden...``; returns the trunk and its output width."""
    layers: list[nn.Module] = []
    width = in_dim
    for hidden in hidden_sizes:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*layers), width


class DuelingHead(nn.Module):
    """Dueling Q-values (Wang et al., 2016): ``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``."""

    def __init__(self, width: int, num_actions: int) -> None:
        super().__init__()
        self.value = nn.Linear(width, 1)
        self.advantage = nn.Linear(width, num_actions)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Q-values ``[..., num_actions]`` from trunk features."""
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(dim=-1, keepdim=True)
