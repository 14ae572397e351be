"""One parameter-shared Q-network for all agents, and per-agent epsilon-greedy exploration.

Every agent runs the same MLP on its own observation plus a one-hot of its agent index (so the
shared network can still behave differently per agent), as in QMIX and VDN's parameter-sharing
setups; with ``prev_action`` the env wrapper (``collector.envs.multiagent``) has already appended
the one-hot of the agent's previous action to its observation. The spec also says how the
collector builds its envs (:meth:`AgentQSpec.make_vector_env`), since the multi-agent policy
needs the wrapper's stacked agent fields.

With action masks (``collector.action_mask_key``) the wrapper reports each agent's mask and the
policy acts under it, per agent: the greedy action is the agent's best allowed one and a random
one is drawn uniformly among its allowed ones (``AgentEpsilonGreedy.act(..., mask=...)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from collector.envs.multiagent import ParallelVectorEnv
from collector.networks.common import DuelingHead, Explore, exploration, mlp_trunk
from collector.networks.distributions import masked_logits


class AgentQNetwork(nn.Module):
    """Q-values of every agent from one shared MLP: ``[..., n_agents, obs] -> [..., n_agents, A]``.

    Args:
        spec: Sizes and options.
        q: A user's per-agent module ``[..., input_dim + n_agents] -> [..., num_actions]`` in
            place of the MLP (``learner.network``,
            :class:`~collector.networks.contracts.AgentQValues`); the agent id is still appended
            here.

    Attributes:
        n_agents: Agents sharing the network.
        num_actions: Actions per agent.
        state_dim: Size of the env's global state (what a mixer conditions on; 0: none).
    """

    def __init__(self, spec: AgentQSpec, q: nn.Module | None = None) -> None:
        super().__init__()
        self.n_agents = spec.n_agents
        self.num_actions = spec.num_actions
        self.state_dim = spec.state_dim
        if q is None:
            trunk, width = mlp_trunk(spec.input_dim + spec.n_agents, spec.hidden_sizes)
            head = DuelingHead(width, spec.num_actions) if spec.dueling else None
            q = nn.Sequential(*trunk, head or nn.Linear(width, spec.num_actions))
        self.q = q
        self.register_buffer("agent_id", torch.eye(spec.n_agents), persistent=False)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """Per-agent Q-values; ``observation`` is ``[..., n_agents, input_dim]``."""
        agent_id = self.agent_id.to(observation.dtype).expand(*observation.shape[:-1], -1)
        return self.q(torch.cat([observation, agent_id], dim=-1))


@dataclasses.dataclass(frozen=True)
class AgentQSpec:
    """A parameter-shared agent Q-network and the env wrapper it needs.

    Attributes:
        obs_dim: Size of one agent's observation as the env gives it.
        n_agents: Number of agents.
        num_actions: Discrete actions per agent.
        state_dim: Size of the global state stored with each transition (0: none).
        hidden_sizes: Hidden widths of the shared MLP.
        dueling: Dueling heads.
        prev_action: Agents also see the one-hot of their previous action.
        global_state: The wrapper's state source (``collector.envs.multiagent.GLOBAL_STATES``).
    """

    obs_dim: int
    n_agents: int
    num_actions: int
    state_dim: int = 0
    hidden_sizes: tuple[int, ...] = (64, 64)
    dueling: bool = False
    prev_action: bool = False
    global_state: str = "auto"
    family: ClassVar[str] = "agents"  # its contract: collector.networks.contracts

    @property
    def input_dim(self) -> int:
        """Per-agent input before the agent id: the observation (and previous action)."""
        return self.obs_dim + (self.num_actions if self.prev_action else 0)

    def build(self) -> AgentQNetwork:
        """Returns a freshly initialized network (uses torch's global RNG)."""
        return AgentQNetwork(self)

    def make_policy(self, network: nn.Module, seed: np.random.SeedSequence) -> AgentEpsilonGreedy:
        """The per-agent epsilon-greedy policy collectors run with this network."""
        return AgentEpsilonGreedy(network, self.num_actions, np.random.default_rng(seed))

    def make_vector_env(
        self,
        env_id: str,
        num_envs: int,
        *,
        mode: str = "sync",
        env_kwargs: Mapping[str, Any] | None = None,
        action_mask_key: str | None = None,
    ) -> ParallelVectorEnv:
        """The collector's envs: ``num_envs`` parallel envs stepped in this process.

        ``action_mask_key``: where each agent's action mask is (``collector.envs.multiagent``).

        Raises:
            ValueError: If ``mode`` is not ``sync`` or the factory is not a parallel env.
        """
        if mode != "sync":
            raise ValueError(f"vector_mode: multi-agent envs step in-process, got {mode!r}")
        return ParallelVectorEnv.from_factory(
            env_id,
            num_envs,
            env_kwargs=env_kwargs,
            global_state=self.global_state,
            prev_action=self.prev_action,
            action_mask_key=action_mask_key,
        )


class AgentEpsilonGreedy:
    """Epsilon-greedy over the shared Q-network, an independent coin flip per agent.

    Args:
        q_network: An :class:`AgentQNetwork`.
        num_actions: Actions per agent.
        rng: Generator for the coin flips and random actions.

    Examples:
        >>> spec = AgentQSpec(obs_dim=4, n_agents=3, num_actions=5)
        >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
        >>> obs = {"observation": np.zeros((2, 3, 4), np.float32)}
        >>> actions, extras = policy.act(obs, {"epsilon": 0.1})
        >>> actions.shape, actions.dtype, extras
        ((2, 3), dtype('int64'), {})
    """

    def __init__(self, q_network: nn.Module, num_actions: int, rng: np.random.Generator) -> None:
        self.q_network = q_network
        self.num_actions = num_actions
        self.rng = rng

    def act(
        self, obs: Mapping[str, np.ndarray], explore: Explore, *, mask: np.ndarray | None = None
    ):
        """Returns int64 actions ``[num_envs, n_agents]`` and no extras.

        Args:
            obs: The wrapper's observation mapping; ``obs["observation"]`` is
                ``[num_envs, n_agents, input_dim]``.
            explore: ``epsilon`` (or a float; each agent explores with that probability on its
                own), ``random`` (epsilon 1) or ``deterministic`` (epsilon 0).
            mask: Bool ``[num_envs, n_agents, num_actions]``, True where an agent's action is
                allowed: each agent's greedy action is its best allowed one, and its random
                action is uniform among its allowed ones.
        """
        params = exploration(explore)
        epsilon = float(params.get("epsilon", 0.0))
        if params.get("random"):
            epsilon = 1.0
        if params.get("deterministic"):
            epsilon = 0.0
        agent_obs = obs["observation"]
        shape = agent_obs.shape[:2]
        if epsilon >= 1.0:
            return self._random(shape, mask), {}
        with torch.inference_mode():
            q_values = self.q_network(torch.as_tensor(agent_obs))
            if mask is not None:
                q_values = masked_logits(q_values, torch.as_tensor(mask))
            greedy = q_values.argmax(dim=-1).numpy()
        if epsilon <= 0.0:
            return greedy, {}
        explore_mask = self.rng.random(shape) < epsilon
        if explore_mask.any():
            greedy = np.where(explore_mask, self._random(shape, mask), greedy)
        return greedy, {}

    def _random(self, shape: tuple[int, ...], mask: np.ndarray | None) -> np.ndarray:
        """Uniform actions per agent, among the agent's allowed ones where ``mask`` is given."""
        if mask is None:
            return self.rng.integers(0, self.num_actions, size=shape)
        # The largest of uniform keys over the allowed actions is a uniform allowed action.
        keys = np.where(mask, self.rng.random((*shape, self.num_actions)), -1.0)
        return keys.argmax(-1)

    def __call__(self, obs: Mapping[str, np.ndarray], explore: Explore) -> np.ndarray:
        """Returns the actions only."""
        return self.act(obs, explore)[0]

    def state_dict(self) -> dict:
        """The exploration RNG's state (JSON-able)."""
        return {"numpy_rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        """Restores the exploration RNG."""
        self.rng.bit_generator.state = state["numpy_rng"]
