"""The multi-agent network's input features from what a caller holds.

The agent network (``collector.networks.agents``) reads each agent's observation, followed, with
``learner.marl.prev_action``, by the one-hot of that agent's previous action, and appends the
one-hot of the agent's index itself. The multi-agent env wrapper (``collector.envs.multiagent``)
returns ``{"observation": [n, n_agents, width], "state": ...}`` with the previous actions
already in; :class:`AgentFeatures` takes that, the bare array, or one step's agent observations
``[n_agents, obs_dim]`` without them, and then keeps the previous actions itself (zeros after
:meth:`AgentFeatures.reset`, as the wrapper does after an env reset).

Examples:
    >>> features = AgentFeatures(obs_dim=2, num_actions=3, prev_action=True)
    >>> features(np.zeros((2, 2), np.float32)).shape  # two agents, no previous action yet
    (2, 5)
    >>> features.record(np.array([2, 0]))
    >>> features(np.zeros((2, 2), np.float32))[:, 2:]
    array([[0., 0., 1.],
           [1., 0., 0.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


class AgentFeatures:
    """Builds the agent network's input rows (see the module docstring).

    Args:
        obs_dim: One agent's observation width as the env gives it.
        num_actions: Actions per agent.
        prev_action: Whether the network also reads the previous action's one-hot.
    """

    def __init__(self, obs_dim: int, num_actions: int, prev_action: bool) -> None:
        self.obs_dim = obs_dim
        self.num_actions = num_actions
        self.prev_action = prev_action
        self.last: np.ndarray | None = None  # the previous actions of a single-step caller

    @property
    def width(self) -> int:
        """The network's per-agent input width (before the agent id)."""
        return self.obs_dim + (self.num_actions if self.prev_action else 0)

    def reset(self) -> None:
        """A new episode: no previous actions."""
        self.last = None

    def __call__(self, observation):
        """The ``[..., n_agents, width]`` input of ``observation`` (numpy or torch).

        Raises:
            ValueError: If the agents' observation width is neither ``obs_dim`` nor ``width``.
        """
        if isinstance(observation, Mapping):
            observation = observation["observation"]
        width = observation.shape[-1]
        if width == self.width:
            return observation
        if width != self.obs_dim or not self.prev_action:
            raise ValueError(
                f"observation: agents' observations must be {self.width} wide"
                + (f" (or {self.obs_dim} without the previous actions)" if self.prev_action else "")
                + f", got {tuple(observation.shape)}"
            )
        if observation.ndim != 2:
            raise ValueError(
                "observation: previous actions are kept for one step's agents [n_agents, "
                f"{self.obs_dim}] only; batches carry them (the env wrapper's), got "
                f"{tuple(observation.shape)}"
            )
        one_hot = np.zeros((observation.shape[0], self.num_actions), np.float32)
        if self.last is not None:
            one_hot[np.arange(len(self.last)), self.last] = 1.0
        if isinstance(observation, np.ndarray):
            return np.concatenate([observation.astype(np.float32), one_hot], axis=-1)
        import torch

        extra = torch.as_tensor(one_hot, device=observation.device)
        return torch.cat([observation.float(), extra], dim=-1)

    def record(self, actions) -> None:
        """Remembers one step's actions ``[n_agents]`` as the next step's previous actions."""
        if self.prev_action:
            self.last = np.asarray(actions, dtype=np.int64).reshape(-1)
