"""Policy networks and exploration for collectors.

The network architecture is described by a small frozen :class:`ModelSpec` that the driver hands
to both collectors and learners, so both build the same module and exchange plain state dicts.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """An MLP Q-network ``obs_dim -> hidden... -> num_actions``.

    Attributes:
        obs_dim: Size of the flat observation.
        num_actions: Number of discrete actions.
        hidden_sizes: Widths of the hidden layers.
    """

    obs_dim: int
    num_actions: int
    hidden_sizes: tuple[int, ...] = (64, 64)

    def build(self) -> nn.Module:
        """Returns a freshly initialized network (uses torch's global RNG)."""
        layers: list[nn.Module] = []
        width = self.obs_dim
        for hidden in self.hidden_sizes:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, self.num_actions))
        return nn.Sequential(*layers)


class EpsilonGreedy:
    """Epsilon-greedy action selection over a Q-network, batched over envs.

    Args:
        q_network: Module mapping ``[n, obs_dim]`` observations to ``[n, num_actions]`` values.
        num_actions: Number of discrete actions.
        rng: Generator for the exploration coin flips and random actions.
    """

    def __init__(self, q_network: nn.Module, num_actions: int, rng: np.random.Generator) -> None:
        self.q_network = q_network
        self.num_actions = num_actions
        self.rng = rng

    def __call__(self, obs: np.ndarray, epsilon: float) -> np.ndarray:
        """Returns an int64 action per observation row."""
        n = obs.shape[0]
        explore = self.rng.random(n) < epsilon
        random_actions = self.rng.integers(0, self.num_actions, size=n)
        if explore.all():
            return random_actions
        with torch.inference_mode():
            q_values = self.q_network(torch.as_tensor(obs, dtype=torch.float32))
        greedy = q_values.argmax(dim=-1).numpy()
        return np.where(explore, random_actions, greedy)
