"""Recurrent policies: an LSTM or GRU core between the encoder and the heads.

``learner.recurrent: lstm | gru`` selects them.

A recurrent network is the feed-forward one with memory: the observation encoder
(:class:`~collector.networks.encoders.MultiInputEncoder`: an MLP input for a flat ``Box``, the
CNN torso over frames, per-key encoders over a ``Dict``), an MLP trunk (``learner.hidden_sizes``),
then :class:`RecurrentCore` (``learner.recurrent: lstm | gru`` of
``learner.recurrent_hidden_size`` units), then the heads: Q-values (:class:`RecurrentQ`, DQN and
R2D2) or a policy and a value (:class:`RecurrentActorCritic`, PPO, A2C, REINFORCE, IMPALA,
APPO).

**The state protocol** (what a user's recurrent network implements too):

* the state is one float32 tensor ``[B, state_size]`` per batch of sequences (an LSTM's
  ``h`` and ``c`` side by side, a GRU's ``h``); ``initial_state(batch)`` returns zeros, the state
  at every episode's first step;
* ``forward(observation, state, reset=None, valid=None)`` runs whole sequences: ``observation``
  is ``[B, T, *obs_shape]`` (or a mapping of such), ``reset [B, T]`` is True where step ``t`` is
  an episode's first (the state is zeroed before the step), ``valid [B, T]`` False on padding
  (the state passes padded steps unchanged, so the returned state is the state after each
  row's last real step). It returns the heads' outputs with ``[B, T]`` leading and the state
  after the sequence: ``(q, state)`` or ``(logits_or_mean, value, state)``;
* ``h_t = core(h_{t-1}, x_t)``: the action at step ``t`` comes from the state that has seen
  ``x_0 .. x_t``. A stored sequence carries the state *before* its first step.

Collectors act one step at a time with :class:`RecurrentPolicy`: ``act(obs, explore, state=)``
returns ``(actions, extras, next_state)`` (the feed-forward policies' sampling, epsilon-greedy
and masks unchanged, through :class:`StepView`), batched across envs; the worker keeps one state
per env and zeroes it where an episode starts. The view runs the network's ``forward_step(obs
[B, ...], state)``: the one-step form of ``forward`` (the encoder's flat path, the trunk,
:meth:`RecurrentCore.step`, the heads) without the sequence reshapes, resets, padding and module
calls, equal to ``forward`` on a one-step sequence (``tests/test_recurrent_fast_step.py``).

Examples:
    >>> core = RecurrentCore("lstm", 3, 8)
    >>> x, state = torch.randn(2, 5, 3), core.initial_state(2)
    >>> y, last = core(x, state)
    >>> y.shape, last.shape
    (torch.Size([2, 5, 8]), torch.Size([2, 16]))
    >>> reset = torch.zeros(2, 5, dtype=torch.bool); reset[:, 3] = True
    >>> y2, _ = core(x, state, reset)  # steps 3 and 4 start from zeros again
    >>> torch.allclose(y2[:, 3:], core(x[:, 3:], state)[0], atol=1e-6)
    True
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from collector.envs.spaces import ObservationLayout
from collector.networks.actor_critic import ActorCritic, ActorCriticSpec, StochasticActor
from collector.networks.common import DuelingHead, mlp_trunk
from collector.networks.encoders import MultiInputEncoder
from collector.networks.q_mlp import EpsilonGreedy
from collector.networks.stepping import RecurrentPolicy, StepView

RECURRENT_KINDS = ("lstm", "gru")


def state_size(kind: str, hidden_size: int) -> int:
    """Width of the state: ``2 * hidden`` for an LSTM (``h``, ``c``), ``hidden`` for a GRU."""
    return 2 * hidden_size if kind == "lstm" else hidden_size


class RecurrentCore(nn.Module):
    """An LSTM or GRU over ``[B, T, F]`` features with episode resets and padding.

    Args:
        kind: ``lstm`` or ``gru``.
        input_size: Features per step.
        hidden_size: Units (the output width).

    The sequence runs in segments between the steps where some row resets or changes validity,
    each segment one call of the fused ``nn.LSTM``/``nn.GRU``.
    """

    def __init__(self, kind: str, input_size: int, hidden_size: int) -> None:
        super().__init__()
        if kind not in RECURRENT_KINDS:
            raise ValueError(f"learner.recurrent: must be one of {RECURRENT_KINDS}, got {kind!r}")
        self.kind = kind
        self.hidden_size = hidden_size
        rnn = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = rnn(input_size, hidden_size, batch_first=True)
        self.state_size = state_size(kind, hidden_size)

    def initial_state(self, batch: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Zeros ``[batch, state_size]``: the state at an episode's first step."""
        return torch.zeros(batch, self.state_size, device=device)

    def _unpack(self, state: torch.Tensor):
        if self.kind == "lstm":
            h, c = state.split(self.hidden_size, dim=-1)
            return h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()
        return state.unsqueeze(0).contiguous()

    def _pack(self, packed) -> torch.Tensor:
        if self.kind == "lstm":
            return torch.cat([packed[0][0], packed[1][0]], dim=-1)
        return packed[0]

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: ``x [B, input_size]`` -> ``(output [B, hidden], state after [B, state_size])``.

        The cell functions (``torch.lstm_cell``, ``torch.gru_cell``) over the weights of the
        ``nn.LSTM``/``nn.GRU``: the same arithmetic as one step of :meth:`forward` without the
        fused sequence op's packing, which at one step of a few envs costs several times the
        cell's own work. What collectors run once per vector step (``forward_step``).
        """
        # ``_flat_weights``: nn.LSTM/GRU's own list of (w_ih, w_hh, b_ih, b_hh), kept current
        # when the parameters are reassigned or moved.
        weights = self.rnn._flat_weights
        if self.kind == "lstm":
            hidden = self.hidden_size
            h, c = torch.lstm_cell(x, (state[:, :hidden], state[:, hidden:]), *weights)
            return h, torch.cat((h, c), dim=1)
        h = torch.gru_cell(x, state, *weights)
        return h, h

    def forward(
        self,
        x: torch.Tensor,
        state: torch.Tensor,
        reset: torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Runs the sequences; returns ``(outputs [B, T, hidden], state after [B, state_size])``.

        Args:
            x: ``[B, T, input_size]``.
            state: ``[B, state_size]``, the state before step 0.
            reset: Bool ``[B, T]``: zero the state before these steps (episode starts).
            valid: Bool ``[B, T]``: False on padding; the state skips those steps (their
                outputs are computed but mean nothing).
        """
        steps = x.shape[1]
        if steps == 1 and reset is None and valid is None and torch.is_inference_mode_enabled():
            out, state = self.step(x[:, 0], state)  # acting: one step, no fused-op overhead
            return out.unsqueeze(1), state
        if reset is None and valid is None:  # one fused call (and a traceable graph: export)
            out, packed = self.rnn(x, self._unpack(state))
            return out, self._pack(packed)
        cuts = torch.zeros(steps, dtype=torch.bool, device=x.device)
        if reset is not None:
            reset = reset.to(torch.bool)
            cuts |= reset.any(0)
        if valid is not None:
            valid = valid.to(torch.bool)
            cuts[1:] |= (valid[:, 1:] != valid[:, :-1]).any(0)
        cuts[0] = True
        starts = [*torch.nonzero(cuts).flatten().tolist(), steps]
        outputs = []
        for begin, end in itertools.pairwise(starts):
            if reset is not None:
                state = state * (~reset[:, begin]).unsqueeze(-1).to(state.dtype)
            out, packed = self.rnn(x[:, begin:end], self._unpack(state))
            new_state = self._pack(packed)
            if valid is not None:
                new_state = torch.where(valid[:, begin].unsqueeze(-1), new_state, state)
            state = new_state
            outputs.append(out)
        return torch.cat(outputs, dim=1) if len(outputs) > 1 else outputs[0], state


def _flat_steps(observation: Any) -> tuple[Any, int, int]:
    """``[B, T, ...]`` observations (or a mapping of them) flattened to ``[B * T, ...]``."""
    if isinstance(observation, Mapping) or hasattr(observation, "keys"):
        first = next(iter(observation.values()))
        flat = {key: value.flatten(0, 1) for key, value in observation.items()}
        return flat, first.shape[0], first.shape[1]
    return observation.flatten(0, 1), observation.shape[0], observation.shape[1]


def _layers(sequence: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``sequence(x)`` without the module calls' machinery.

    Linear layers and ReLUs run as the functions their forwards call, any other layer through
    its ``forward``.
    """
    for layer in sequence:
        kind = type(layer)
        if kind is nn.Linear:
            x = nn.functional.linear(x, layer.weight, layer.bias)
        elif kind is nn.ReLU:
            x = torch.relu(x)
        else:
            x = layer.forward(x)
    return x


class _Recurrent(nn.Module):
    """Encoder, trunk and core: ``[B, T, *obs]`` observations to ``[B, T, hidden]`` memories."""

    def __init__(self, spec: Any) -> None:
        super().__init__()
        self.encoder = MultiInputEncoder(spec.layout, spec.torso, spec.discrete)
        self.trunk, width = mlp_trunk(self.encoder.features, spec.hidden_sizes)
        self.core = RecurrentCore(spec.recurrent, width, spec.recurrent_hidden_size)

    def initial_state(self, batch: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Zeros ``[batch, state_size]``."""
        return self.core.initial_state(batch, device)

    def memories(
        self, observation: Any, state: torch.Tensor, reset=None, valid=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        flat, size, steps = _flat_steps(observation)
        features = self.trunk(self.encoder(flat)).unflatten(0, (size, steps))
        return self.core(features, state, reset, valid)

    def step_memories(self, observation: Any, state: torch.Tensor):
        """One step's memories ``[B, hidden]`` and the state after (``observation [B, ...]``).

        :meth:`memories` of a one-step sequence, computed by the same layers without the
        sequence reshapes and module calls (:meth:`RecurrentCore.step`).
        """
        encoder = self.encoder
        x = (
            observation.reshape(observation.shape[0], -1).float()
            if encoder.flat
            else encoder(observation)
        )
        return self.core.step(_layers(self.trunk, x), state)


class RecurrentQ(_Recurrent):
    """``forward(obs [B, T, ...], state, reset, valid) -> (q [B, T, n_actions], state)``."""

    def __init__(self, spec: RecurrentQSpec) -> None:
        super().__init__(spec)
        self.spec = spec
        hidden = spec.recurrent_hidden_size
        self.head = (
            DuelingHead(hidden, spec.num_actions)
            if spec.dueling
            else nn.Linear(hidden, spec.num_actions)
        )

    def forward(self, observation, state, reset=None, valid=None):
        """Q-values of every step and the state after the sequence."""
        memories, state = self.memories(observation, state, reset, valid)
        return self.head(memories), state

    def forward_step(self, observation, state):
        """One step of :meth:`forward`: ``obs [B, ...]`` -> ``(q [B, n_actions], state)``."""
        memories, state = self.step_memories(observation, state)
        return self.head(memories), state


class RecurrentActorCritic(_Recurrent):
    """``forward(obs, state, reset, valid) -> (logits or mean [B, T, A], value [B, T], state)``.

    The heads are an :class:`~collector.networks.actor_critic.ActorCritic` of linear layers over
    the memories (its ``distribution`` and ``log_std`` are the network's).
    """

    def __init__(self, spec: RecurrentActorCriticSpec) -> None:
        super().__init__(spec)
        self.heads = ActorCritic(
            ActorCriticSpec(
                spec.recurrent_hidden_size,
                spec.action_dim,
                spec.distribution,
                (),
                nvec=spec.nvec,
                noise_beta=spec.noise_beta,
                noise_horizon=spec.noise_horizon,
            )
        )
        self.spec = self.heads.spec

    @property
    def log_std(self) -> torch.Tensor:
        """A Gaussian's learned log standard deviation."""
        return self.heads.log_std

    def forward(self, observation, state, reset=None, valid=None):
        """The actor's output and the value of every step, and the state after the sequence."""
        memories, state = self.memories(observation, state, reset, valid)
        out, value = self.heads(memories)
        return out, value, state

    def forward_step(self, observation, state):
        """One step of :meth:`forward`: ``obs [B, ...]`` -> ``(out [B, A], value [B], state)``."""
        memories, state = self.step_memories(observation, state)
        heads = self.heads
        return (
            _layers(heads.actor, memories),
            _layers(heads.critic, memories).squeeze(-1),
            state,
        )

    def distribution(self, out: torch.Tensor) -> torch.distributions.Distribution:
        """The action distribution of the actor's output."""
        return self.heads.distribution(out)


@dataclasses.dataclass(frozen=True)
class _RecurrentFields:
    layout: ObservationLayout
    hidden_sizes: tuple[int, ...] = (64,)
    recurrent: str = "lstm"
    recurrent_hidden_size: int = 128
    torso: str = "nature"
    discrete: str = "one_hot"

    def __post_init__(self) -> None:
        if self.recurrent not in RECURRENT_KINDS:
            raise ValueError(
                f"learner.recurrent: must be one of {RECURRENT_KINDS}, got {self.recurrent!r}"
            )
        if self.recurrent_hidden_size < 1:
            raise ValueError(
                f"learner.recurrent_hidden_size: must be >= 1, got {self.recurrent_hidden_size}"
            )

    @property
    def state_size(self) -> int:
        """Width of the state tensor."""
        return state_size(self.recurrent, self.recurrent_hidden_size)


@dataclasses.dataclass(frozen=True)
class RecurrentQSpec(_RecurrentFields):
    """A recurrent Q-network (DQN with ``learner.recurrent``, R2D2).

    Attributes:
        layout: The observation's layout (``collector.envs.spaces.describe``).
        hidden_sizes: The MLP trunk between the encoder and the core.
        recurrent: ``lstm`` or ``gru``.
        recurrent_hidden_size: The core's units.
        torso: CNN over image keys (``learner.pixel_torso``).
        discrete: ``one_hot`` or ``embedding``.
        num_actions: Discrete actions.
        dueling: Dueling heads over the memories.

    Examples:
        >>> import gymnasium as gym
        >>> from collector.envs.spaces import describe
        >>> spec = RecurrentQSpec(describe(gym.spaces.Box(-1, 1, (2,))), num_actions=3)
        >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
        >>> state = policy.initial_state(4)
        >>> actions, extras, state = policy.act(np.zeros((4, 2), np.float32), 0.0, state=state)
        >>> actions.shape, state.shape
        ((4,), (4, 256))
    """

    num_actions: int = 2
    dueling: bool = False
    family: ClassVar[str] = "recurrent_q"  # its contract: collector.networks.contracts

    def build(self) -> RecurrentQ:
        """Returns a freshly initialized network (uses torch's global RNG)."""
        return RecurrentQ(self)

    def make_policy(self, network: RecurrentQ, seed: np.random.SeedSequence) -> RecurrentPolicy:
        """Epsilon-greedy over the network, one step at a time with a state per env."""
        view = StepView(network)
        inner = EpsilonGreedy(view, self.num_actions, np.random.default_rng(seed))
        return RecurrentPolicy(inner, view)


@dataclasses.dataclass(frozen=True)
class RecurrentActorCriticSpec(_RecurrentFields):
    """A recurrent actor-critic (PPO, A2C, REINFORCE, IMPALA, APPO with ``learner.recurrent``).

    Attributes:
        action_dim: Discrete actions (categorical), dimensions (Gaussian) or ``sum(nvec)``.
        distribution: ``categorical``, ``gaussian``, ``multi_categorical`` or ``bernoulli``.
        nvec: ``multi_categorical``: choices per action dimension.
        noise_beta: A Gaussian's noise color (:mod:`collector.noise`).
        noise_horizon: Steps per colored noise sequence.

    The other attributes are :class:`RecurrentQSpec`'s.
    """

    action_dim: int = 2
    distribution: str = "categorical"
    nvec: tuple[int, ...] = ()
    noise_beta: float = 0.0
    noise_horizon: int = 1000
    family: ClassVar[str] = "recurrent_actor_critic"  # collector.networks.contracts

    def build(self) -> RecurrentActorCritic:
        """Returns a freshly initialized network (uses torch's global RNG)."""
        return RecurrentActorCritic(self)

    def make_policy(self, network: RecurrentActorCritic, seed) -> RecurrentPolicy:
        """The feed-forward sampling policy, one step at a time with a state per env."""
        view = StepView(network)
        inner = StochasticActor(view, seed, noise_beta=self.noise_beta, horizon=self.noise_horizon)
        return RecurrentPolicy(inner, view)
