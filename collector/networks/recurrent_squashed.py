"""SAC with memory: a recurrent tanh-Gaussian actor and recurrent twin critics.

``algorithm: sac`` with ``learner.recurrent: lstm | gru`` trains :class:`RecurrentSoftActorCritic`
from stored sequences (``replay.sequence_length``; the loss is ``learner.losses.sac_sequences``).
It holds three recurrent networks of the same shape as the other recurrent families (the
observation encoder, the MLP trunk of ``learner.hidden_sizes``, then an LSTM or GRU core of
``learner.recurrent_hidden_size`` units; ``collector.networks.recurrent``):

* the actor: the core's memory ``m_t`` (of ``o_0 .. o_t``) to the mean and clamped log standard
  deviation of the pre-squash Gaussian; the action is ``center + half_range * tanh(u)`` and its
  log-probability the feed-forward actor's (:func:`~collector.networks.squashed.squashed_sample`);
* two critics ``Q_i(o_0 .. o_t, a_t)``: each its own core over the observations, then an MLP of
  ``learner.hidden_sizes`` over ``[memory, action]`` to one value, so a critic scores any action
  at a step without rerunning its core (the actor loss scores the actor's fresh samples).

Separate cores keep the critics' regression from pulling on the actor's memory (Ni et al.,
"Recurrent Model-Free RL Can Be a Strong Baseline for Many POMDPs", ICML 2022). **The state** is
one tensor ``[B, 3 * core_state]``: the actor's, the first critic's and the second critic's
states side by side, so the collectors advance all three cores as they act and every stored
sequence carries the state of each before its first step (the R2D2 stored state, for the
critics too). The state protocol is the other recurrent families':
``forward(observation [B, T, ...], state, reset=None, valid=None) -> (mean, log_std, state)``.
The published weights are the whole module (the critics' cores must advance in the collectors);
the target critics live in the loss.

Examples:
    >>> import gymnasium as gym
    >>> from collector.envs.spaces import describe
    >>> spec = RecurrentSquashedSpec(describe(gym.spaces.Box(-1, 1, (2,))), (16,), "gru", 8,
    ...                              action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> net = spec.build()
    >>> mean, log_std, state = net(torch.zeros(3, 5, 2), net.initial_state(3))
    >>> mean.shape, state.shape
    (torch.Size([3, 5, 1]), torch.Size([3, 24]))
    >>> policy = spec.make_policy(net, np.random.SeedSequence(0))
    >>> state = policy.initial_state(3)
    >>> actions, _, state = policy.act(np.zeros((3, 2), np.float32), {}, state=state)
    >>> actions.shape, bool(np.abs(actions).max() <= 2.0), state.shape
    ((3, 1), True, (3, 24))
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from collector.networks.common import Explore, mlp_trunk
from collector.networks.recurrent import _Recurrent, _RecurrentFields
from collector.networks.squashed import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    TanhGaussianPolicy,
    squashed_sample,
)
from collector.networks.stepping import RecurrentPolicy, StepView


@dataclasses.dataclass(frozen=True)
class RecurrentSquashedSpec(_RecurrentFields):
    """SAC's recurrent actor and twin critics (``algorithm: sac`` with ``learner.recurrent``).

    Attributes:
        layout: The observation's layout (``collector.envs.spaces.describe``).
        hidden_sizes: The MLP trunk before each core, and each critic's MLP over
            ``[memory, action]``.
        recurrent: ``lstm`` or ``gru``.
        recurrent_hidden_size: Each core's units.
        torso: CNN over image keys (``learner.pixel_torso``).
        discrete: ``one_hot`` or ``embedding``.
        action_dim: Action dimensions.
        action_low: Lower bound of each action dimension.
        action_high: Upper bound of each action dimension.
        noise_beta: The collectors' exploration noise color (:mod:`collector.noise`).
        noise_horizon: Steps per colored noise sequence.
    """

    action_dim: int = 1
    action_low: tuple[float, ...] = (-1.0,)
    action_high: tuple[float, ...] = (1.0,)
    noise_beta: float = 0.0
    noise_horizon: int = 1000
    family: ClassVar[str] = "recurrent_squashed"

    def __post_init__(self) -> None:
        super().__post_init__()
        low, high = self.action_low, self.action_high
        if len(low) != self.action_dim or len(high) != self.action_dim:
            raise ValueError("action_low, action_high: need one bound per action dimension")
        if not all(
            math.isfinite(lo) and math.isfinite(hi) and lo < hi
            for lo, hi in zip(low, high, strict=True)
        ):
            raise ValueError("action_low, action_high: bounds must be finite with low < high")

    @property
    def state_size(self) -> int:
        """Width of the state: three cores' (the actor's and each critic's)."""
        return 3 * super().state_size

    def build(self) -> RecurrentSoftActorCritic:
        """Returns a freshly initialized network (uses torch's global RNG)."""
        return RecurrentSoftActorCritic(self)

    def make_policy(self, network: RecurrentSoftActorCritic, seed) -> RecurrentPolicy:
        """The tanh-Gaussian sampling policy, one step at a time with a state per env."""
        view = _SquashedStepView(network)
        inner = _StepTanhGaussianPolicy(
            view, seed, noise_beta=self.noise_beta, horizon=self.noise_horizon
        )
        return RecurrentPolicy(inner, view)


class RecurrentSquashedActor(_Recurrent):
    """``memories(obs, state, reset, valid)``, then :meth:`heads`: ``(mean, log_std)``."""

    def __init__(self, spec: RecurrentSquashedSpec) -> None:
        super().__init__(spec)
        self.mean = nn.Linear(spec.recurrent_hidden_size, spec.action_dim)
        self.log_std = nn.Linear(spec.recurrent_hidden_size, spec.action_dim)

    def heads(self, memories: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian's mean and clamped log standard deviation, each ``[..., action_dim]``."""
        return self.mean(memories), self.log_std(memories).clamp(LOG_STD_MIN, LOG_STD_MAX)


class RecurrentCritic(_Recurrent):
    """``memories(obs, state, reset, valid)``, then :meth:`q`: ``Q(memory, action)``."""

    def __init__(self, spec: RecurrentSquashedSpec) -> None:
        super().__init__(spec)
        width = spec.recurrent_hidden_size + spec.action_dim
        self.q_trunk, width = mlp_trunk(width, spec.hidden_sizes)
        self.q_head = nn.Linear(width, 1)

    def q(self, memories: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q-values ``[...]`` of ``action [..., action_dim]`` after ``memories [..., hidden]``."""
        return self.q_head(self.q_trunk(torch.cat([memories, action], dim=-1))).squeeze(-1)


class RecurrentSoftActorCritic(nn.Module):
    """The actor and the twin critics with one packed state (see the module docstring).

    Args:
        spec: Sizes, the core and the env's bounds.
    """

    def __init__(self, spec: RecurrentSquashedSpec) -> None:
        super().__init__()
        self.spec = spec
        self.actor = RecurrentSquashedActor(spec)
        self.q1, self.q2 = RecurrentCritic(spec), RecurrentCritic(spec)
        low = torch.tensor(spec.action_low, dtype=torch.float32)
        high = torch.tensor(spec.action_high, dtype=torch.float32)
        self.register_buffer("center", (high + low) / 2, persistent=False)
        self.register_buffer("half_range", (high - low) / 2, persistent=False)

    def initial_state(self, batch: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Zeros ``[batch, 3 * core_state]``: the state at an episode's first step."""
        return torch.zeros(batch, self.spec.state_size, device=device)

    def split_state(self, state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The actor's, the first critic's and the second critic's states."""
        return state.chunk(3, dim=-1)

    def forward(
        self, observation: Any, state: torch.Tensor, reset=None, valid=None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(mean, log_std)`` of every step ``[B, T, action_dim]`` and the state after.

        Every core advances (the critics' memories are not scored here); ``reset`` and
        ``valid`` as in :class:`~collector.networks.recurrent.RecurrentCore`.
        """
        actor_state, q1_state, q2_state = self.split_state(state)
        memories, actor_state = self.actor.memories(observation, actor_state, reset, valid)
        _, q1_state = self.q1.memories(observation, q1_state, reset, valid)
        _, q2_state = self.q2.memories(observation, q2_state, reset, valid)
        mean, log_std = self.actor.heads(memories)
        return mean, log_std, torch.cat([actor_state, q1_state, q2_state], dim=-1)

    def sample(
        self, mean: torch.Tensor, log_std: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized action in the bounds and its log-probability."""
        return squashed_sample(mean, log_std, self.center, self.half_range, generator)

    def mode(self, mean: torch.Tensor) -> torch.Tensor:
        """The deterministic action ``center + half_range * tanh(mean)`` (evaluation)."""
        return self.center + self.half_range * torch.tanh(mean)


class _SquashedStepView(StepView):
    """One step of :class:`RecurrentSoftActorCritic` as the feed-forward actor's interface."""

    network: RecurrentSoftActorCritic

    @property
    def center(self) -> torch.Tensor:
        return self.network.center

    @property
    def half_range(self) -> torch.Tensor:
        return self.network.half_range

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None):
        mean, log_std = self(obs)
        return self.network.sample(mean, log_std, generator)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        mean, _ = self(obs)
        return self.network.mode(mean)


class _StepTanhGaussianPolicy(TanhGaussianPolicy):
    """The feed-forward sampling (warm-up, colored noise, mode) over the step view."""

    def act(
        self, obs: np.ndarray, explore: Explore = None, *, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict]:
        del mask  # continuous actions carry no mask (refused with sequences)
        return super().act(obs, explore)


__all__ = [
    "RecurrentCritic",
    "RecurrentSoftActorCritic",
    "RecurrentSquashedActor",
    "RecurrentSquashedSpec",
]
