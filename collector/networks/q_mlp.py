"""The MLP Q-network (DQN) and epsilon-greedy action selection over it.

:class:`ModelSpec` builds an MLP ``obs_dim -> hidden... -> num_actions`` (optionally with a
dueling head) and makes :class:`EpsilonGreedy`, the collectors' policy over it; the same spec is
handed to learners, so both build the same module and exchange plain state dicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from collector.networks.common import (
    DuelingHead,
    Explore,
    exploration,
    mlp_trunk,
    observation_tensor,
)
from collector.networks.distributions import masked_logits


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """An MLP Q-network ``obs_dim -> hidden... -> num_actions``.

    Attributes:
        obs_dim: Size of the flat observation.
        num_actions: Number of discrete actions.
        hidden_sizes: Widths of the hidden layers.
        dueling: Separate value and advantage heads (dueling DQN) instead of one linear head.
    """

    obs_dim: int
    num_actions: int
    hidden_sizes: tuple[int, ...] = (64, 64)
    dueling: bool = False
    family: ClassVar[str] = "q"  # its contract: collector.networks.contracts

    def build(self) -> nn.Module:
        """Returns a freshly initialized network (uses torch's global RNG)."""
        trunk, width = mlp_trunk(self.obs_dim, self.hidden_sizes)
        if self.dueling:
            return nn.Sequential(*trunk, DuelingHead(width, self.num_actions))
        return nn.Sequential(*trunk, nn.Linear(width, self.num_actions))

    def make_policy(self, network: nn.Module, seed: np.random.SeedSequence) -> EpsilonGreedy:
        """The exploration policy collectors run with this network."""
        return EpsilonGreedy(network, self.num_actions, np.random.default_rng(seed))


class EpsilonGreedy:
    """Epsilon-greedy action selection over a Q-network, batched over envs.

    Args:
        q_network: Module mapping ``[n, obs_dim]`` observations to ``[n, num_actions]`` values.
        num_actions: Number of discrete actions.
        rng: Generator for the exploration coin flips and random actions.

    Examples:
        >>> policy = ModelSpec(4, 2).make_policy(ModelSpec(4, 2).build(), np.random.SeedSequence(0))
        >>> actions, extras = policy.act(np.zeros((3, 4), np.float32), {"epsilon": 0.1})
        >>> actions.shape, extras
        ((3,), {})
    """

    def __init__(self, q_network: nn.Module, num_actions: int, rng: np.random.Generator) -> None:
        self.q_network = q_network
        self.num_actions = num_actions
        self.rng = rng

    def act(
        self, obs: np.ndarray, explore: Explore, *, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Returns an int64 action per observation row and no extras.

        Args:
            obs: ``[n, obs_dim]`` observations.
            explore: ``epsilon`` (or a float), ``random`` (epsilon 1) or ``deterministic``
                (epsilon 0). With ``epsilon >= 1`` the network is not evaluated.
            mask: Bool ``[n, num_actions]``, True where an action is allowed
                (``collector.envs.masks``): the greedy action is the best allowed one and a
                random action is drawn uniformly among the allowed ones.
        """
        params = exploration(explore)
        epsilon = float(params.get("epsilon", 0.0))
        if params.get("random"):
            epsilon = 1.0
        if params.get("deterministic"):
            epsilon = 0.0
        keyed = isinstance(obs, Mapping)  # a structured observation (collector.envs.spaces)
        n = len(next(iter(obs.values()))) if keyed else obs.shape[0]
        if epsilon >= 1.0:
            return self._random(n, mask), {}
        if keyed:
            x = observation_tensor(obs)
        else:
            x = torch.from_numpy(obs) if obs.dtype == np.float32 else torch.as_tensor(obs).float()
        if torch.is_inference_mode_enabled():
            q_values = self.q_network(x)
        else:
            with torch.inference_mode():
                q_values = self.q_network(x)
        if mask is not None:
            q_values = masked_logits(q_values, torch.as_tensor(mask))
        greedy = q_values.argmax(dim=-1).numpy()
        if epsilon <= 0.0:
            return greedy, {}
        explore = self.rng.random(n) < epsilon
        if explore.any():
            greedy = np.where(explore, self._random(n, mask), greedy)
        return greedy, {}

    def _random(self, n: int, mask: np.ndarray | None) -> np.ndarray:
        """Uniform actions, among the allowed ones where ``mask`` is given."""
        if mask is None:
            return self.rng.integers(0, self.num_actions, size=n)
        # The largest of uniform keys over the allowed actions is a uniform allowed action.
        keys = np.where(mask, self.rng.random((n, self.num_actions)), -1.0)
        return keys.argmax(-1)

    def __call__(self, obs: np.ndarray, explore: Explore) -> np.ndarray:
        """Returns an int64 action per observation row."""
        return self.act(obs, explore)[0]

    def state_dict(self) -> dict:
        """The exploration RNG's state (JSON-able)."""
        return {"numpy_rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        """Restores the exploration RNG."""
        self.rng.bit_generator.state = state["numpy_rng"]
