"""Policy networks and exploration for collectors.

The network architecture is described by a small frozen :class:`ModelSpec` that the driver hands
to both collectors and learners, so both build the same module and exchange plain state dicts.

A spec is anything with ``build() -> nn.Module`` and ``make_policy(network, seed) -> policy``; a
policy has ``act(obs, explore) -> (actions, extras)`` (extras: per-env arrays stored with each
transition, e.g. ``log_prob`` and ``value``) and ``state_dict``/``load_state_dict`` for its RNG.
:class:`ModelSpec` makes :class:`EpsilonGreedy` (DQN); ``collector.stochastic.ActorCriticSpec``
makes categorical or Gaussian actor-critics (PPO, A2C, REINFORCE);
``collector.squashed.SquashedGaussianSpec`` makes SAC's tanh-Gaussian actor;
``collector.agents.AgentQSpec`` makes per-agent epsilon-greedy over one parameter-shared agent
network (IQL, VDN, QMIX). A spec may also have ``make_vector_env`` (the arguments of
:func:`collector.env.make_vector_env`) when its policy needs another env interface: the
multi-agent spec builds PettingZoo envs wrapped by ``collector.multiagent``.

Exploration parameters travel as a small mapping set by the driver's schedule on every rollout
(:func:`exploration`): ``epsilon`` (epsilon-greedy), ``random`` (uniform random actions, e.g.
during ``init_random_frames``), ``deterministic`` (the policy's greedy form: argmax, mode or
mean, for evaluation). A plain float is read as ``{"epsilon": value}``.
"""

from __future__ import annotations

import dataclasses
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

    def act(self, obs: np.ndarray, explore: Explore) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Returns an int64 action per observation row and no extras.

        Args:
            obs: ``[n, obs_dim]`` observations.
            explore: ``epsilon`` (or a float), ``random`` (epsilon 1) or ``deterministic``
                (epsilon 0). With ``epsilon >= 1`` the network is not evaluated.
        """
        params = exploration(explore)
        epsilon = float(params.get("epsilon", 0.0))
        if params.get("random"):
            epsilon = 1.0
        if params.get("deterministic"):
            epsilon = 0.0
        n = obs.shape[0]
        if epsilon >= 1.0:
            return self.rng.integers(0, self.num_actions, size=n), {}
        x = torch.from_numpy(obs) if obs.dtype == np.float32 else torch.as_tensor(obs).float()
        if torch.is_inference_mode_enabled():
            greedy = self.q_network(x).argmax(dim=-1).numpy()
        else:
            with torch.inference_mode():
                greedy = self.q_network(x).argmax(dim=-1).numpy()
        if epsilon <= 0.0:
            return greedy, {}
        explore = self.rng.random(n) < epsilon
        if explore.any():
            greedy = np.where(explore, self.rng.integers(0, self.num_actions, size=n), greedy)
        return greedy, {}

    def __call__(self, obs: np.ndarray, explore: Explore) -> np.ndarray:
        """Returns an int64 action per observation row."""
        return self.act(obs, explore)[0]

    def state_dict(self) -> dict:
        """The exploration RNG's state (JSON-able)."""
        return {"numpy_rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        """Restores the exploration RNG."""
        self.rng.bit_generator.state = state["numpy_rng"]
