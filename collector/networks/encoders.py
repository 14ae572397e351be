"""The default multi-input encoder, and the Q-network and actor-critic built on it.

An observation described by a :class:`~collector.envs.spaces.ObservationLayout` (a ``Dict`` or
``Tuple`` space flattened by key path, or a single ``Discrete``/``MultiBinary``/any-rank ``Box``
that is not a flat vector) is encoded key by key, as SB3's ``CombinedExtractor`` does, and the
features are concatenated before the algorithm's heads:

    * ``image`` keys (rank-3 uint8, at least 36 pixels a side, channels last or first): scaled
      to ``[0, 1]`` and the Nature CNN torso (``collector.networks.cnn``, or the IMPALA ResNet
      with ``learner.pixel_torso: impala``), one torso per key;
    * ``vector`` keys (any other ``Box``, any rank, small uint8 grids such as MiniGrid's
      7x7x3 object codes included): flattened as float;
    * ``discrete`` keys: one-hot (``Discrete(n, start)``: ``n`` features), or a learned
      embedding of ``embedding_dim`` features; ``multi_discrete``: one one-hot per dimension;
    * ``binary`` keys: the bits as float.

:class:`MultiInputEncoder` maps a mapping of tensors ``{key: [B, *shape]}`` (or, for a
non-keyed layout, one tensor) to features ``[B, features]``. :class:`MultiInputQSpec` puts the
MLP trunk and Q head (optionally dueling) on it (DQN), :class:`MultiInputActorCriticSpec` the
actor and critic MLPs of :class:`~collector.networks.actor_critic.ActorCritic` (PPO, A2C,
REINFORCE, IMPALA, APPO); their collector policies are the flat ones'
(:class:`~collector.networks.q_mlp.EpsilonGreedy`,
:class:`~collector.networks.actor_critic.StochasticActor`), which hand observations over as
:func:`~collector.networks.common.observation_tensor` makes them: a dict of tensors keyed like
the layout. A user's network (``learner.network``) receives the same mapping.

Examples:
    >>> import gymnasium as gym
    >>> from collector.envs.spaces import describe
    >>> space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (36, 36, 3), np.uint8),
    ...                          "direction": gym.spaces.Discrete(4)})
    >>> spec = MultiInputActorCriticSpec(describe(space), action_dim=3)
    >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    >>> obs = {"image": np.zeros((2, 36, 36, 3), np.uint8), "direction": np.array([0, 3])}
    >>> actions, extras = policy.act(obs, {})
    >>> actions.shape, sorted(extras)
    ((2,), ['log_prob', 'value'])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from collector.config import DISCRETE_ENCODINGS
from collector.envs.spaces import Leaf, ObservationLayout, channels_last
from collector.networks.actor_critic import ActorCritic, ActorCriticSpec, StochasticActor
from collector.networks.cnn import PixelScale, impala_torso, nature_torso
from collector.networks.common import DuelingHead, mlp_trunk
from collector.networks.q_mlp import EpsilonGreedy


class _Image(nn.Module):
    """Scale, channels first, CNN torso: ``[B, *shape]`` uint8 -> ``[B, features]``."""

    def __init__(self, leaf: Leaf, torso: str) -> None:
        super().__init__()
        self.last = channels_last(leaf.shape)
        channels = leaf.shape[-1] if self.last else leaf.shape[0]
        self.scale = PixelScale()
        self.torso = nature_torso(channels) if torso == "nature" else impala_torso(channels)
        with torch.no_grad():
            self.width = int(self.torso(torch.zeros(1, *self._chw(leaf.shape))).shape[-1])

    def _chw(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (shape[2], shape[0], shape[1]) if self.last else shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """CNN features of the images."""
        x = self.scale(x)
        if self.last:
            x = x.permute(0, 3, 1, 2)
        return self.torso(x)


class _Embedding(nn.Module):
    """Discrete values (``start`` subtracted) to learned vectors, one table per dimension."""

    def __init__(self, leaf: Leaf, dim: int) -> None:
        super().__init__()
        self.register_buffer("starts", torch.tensor(leaf.starts, dtype=torch.long))
        self.register_buffer(
            "offsets", torch.tensor(np.cumsum((0, *leaf.sizes[:-1])), dtype=torch.long)
        )
        self.table = nn.Embedding(int(sum(leaf.sizes)), dim)
        self.width = dim * len(leaf.sizes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenated embeddings ``[B, dim * dims]``."""
        index = x.reshape(len(x), -1).long() - self.starts + self.offsets
        return self.table(index).flatten(1)


def _one_hot(leaf: Leaf, x: torch.Tensor) -> torch.Tensor:
    """One-hot of each discrete dimension, concatenated ``[B, sum(sizes)]``."""
    x = x.reshape(len(x), -1).long()
    parts = [
        nn.functional.one_hot(x[:, i] - start, size)
        for i, (size, start) in enumerate(zip(leaf.sizes, leaf.starts, strict=True))
    ]
    return torch.cat(parts, dim=-1).float()


class MultiInputEncoder(nn.Module):
    """Per-key encoders concatenated: observations ``{key: [B, *shape]}`` -> ``[B, features]``.

    Args:
        layout: The observation's keys, shapes and kinds.
        torso: ``nature`` or ``impala``, the CNN over image keys.
        discrete: ``one_hot`` or ``embedding`` for ``discrete``/``multi_discrete`` keys.
        embedding_dim: Features per embedded discrete dimension.

    Attributes:
        features: Width of the output.
    """

    def __init__(
        self,
        layout: ObservationLayout,
        torso: str = "nature",
        discrete: str = "one_hot",
        embedding_dim: int = 8,
    ) -> None:
        super().__init__()
        if discrete not in DISCRETE_ENCODINGS:
            raise ValueError(f"discrete: must be one of {DISCRETE_ENCODINGS}, got {discrete!r}")
        self.layout = layout
        self.modules_by_key = nn.ModuleDict()
        width = 0
        for index, leaf in enumerate(layout.leaves):
            if leaf.kind == "image":
                module: nn.Module = _Image(leaf, torso)
            elif leaf.kind in ("discrete", "multi_discrete") and discrete == "embedding":
                module = _Embedding(leaf, embedding_dim)
            else:
                width += leaf.width
                continue
            self.modules_by_key[f"key{index}"] = module
            width += module.width
        self.features = width
        # One ``Box`` observation (not a mapping) encoded as its flattened floats: ``forward``
        # skips the per-key loop (what recurrent acting runs once per vector step).
        self.flat = not layout.keyed and len(layout.leaves) == 1 and not self.modules_by_key
        self.flat = self.flat and layout.leaves[0].kind not in ("discrete", "multi_discrete")

    def forward(self, observation: Any) -> torch.Tensor:
        """Concatenated features ``[B, features]`` (float32)."""
        if self.flat:  # one Box: its values, flattened (the loop's only part, as it makes it)
            return observation.reshape(observation.shape[0], -1).float()
        parts = []
        for index, leaf in enumerate(self.layout.leaves):
            x = observation[leaf.key] if self.layout.keyed else observation
            name = f"key{index}"
            if name in self.modules_by_key:
                parts.append(self.modules_by_key[name](x))
            elif leaf.kind in ("discrete", "multi_discrete"):
                parts.append(_one_hot(leaf, x))
            else:
                parts.append(x.reshape(x.shape[0], -1).float())
        return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]


@dataclasses.dataclass(frozen=True)
class MultiInputQSpec:
    """A Q-network over structured observations: the encoder, an MLP trunk, a Q head.

    Attributes:
        layout: The observation's layout.
        num_actions: Number of discrete actions.
        hidden_sizes: Widths of the trunk's hidden layers.
        dueling: Dueling value and advantage heads.
        torso: CNN over image keys (``learner.pixel_torso``).
        discrete: ``one_hot`` or ``embedding``.
    """

    layout: ObservationLayout
    num_actions: int
    hidden_sizes: tuple[int, ...] = (64, 64)
    dueling: bool = False
    torso: str = "nature"
    discrete: str = "one_hot"
    family: ClassVar[str] = "q"  # its contract: collector.networks.contracts

    def build(self) -> nn.Module:
        """Returns a freshly initialized network (uses torch's global RNG)."""
        encoder = MultiInputEncoder(self.layout, self.torso, self.discrete)
        trunk, width = mlp_trunk(encoder.features, self.hidden_sizes)
        head = (
            DuelingHead(width, self.num_actions)
            if self.dueling
            else nn.Linear(width, self.num_actions)
        )
        return nn.Sequential(encoder, *trunk, head)

    def make_policy(self, network: nn.Module, seed: np.random.SeedSequence) -> EpsilonGreedy:
        """Epsilon-greedy over the network (observations: a dict of arrays)."""
        return EpsilonGreedy(network, self.num_actions, np.random.default_rng(seed))


@dataclasses.dataclass(frozen=True)
class MultiInputActorCriticSpec:
    """An actor-critic over structured observations: one shared encoder, actor and critic MLPs.

    Attributes:
        layout: The observation's layout.
        action_dim: Discrete actions (categorical) or action dimensions (Gaussian).
        distribution: ``categorical`` or ``gaussian``.
        hidden_sizes: Hidden widths of both MLPs.
        torso: CNN over image keys (``learner.pixel_torso``).
        discrete: ``one_hot`` or ``embedding``.
        noise_beta: A Gaussian's noise color (:mod:`collector.noise`).
        noise_horizon: Steps per colored noise sequence.
    """

    layout: ObservationLayout
    action_dim: int
    distribution: str = "categorical"
    hidden_sizes: tuple[int, ...] = (64, 64)
    torso: str = "nature"
    discrete: str = "one_hot"
    noise_beta: float = 0.0
    noise_horizon: int = 1000
    family: ClassVar[str] = "actor_critic"  # its contract: collector.networks.contracts

    def build(self) -> MultiInputActorCritic:
        """Returns a freshly initialized module (uses torch's global RNG)."""
        return MultiInputActorCritic(self)

    def make_policy(self, network: MultiInputActorCritic, seed) -> StochasticActor:
        """The sampling policy collectors run with this module."""
        return StochasticActor(
            network, seed, noise_beta=self.noise_beta, horizon=self.noise_horizon
        )


class MultiInputActorCritic(nn.Module):
    """``forward(obs) -> (logits or mean, value)`` over the encoder's shared features.

    ``spec`` (the heads' :class:`ActorCriticSpec`), ``distribution``, ``critic(obs)`` and
    ``log_std`` are those :class:`~collector.networks.actor_critic.StochasticActor` and the
    losses read of an :class:`ActorCritic`.
    """

    def __init__(self, spec: MultiInputActorCriticSpec) -> None:
        super().__init__()
        self.encoder = MultiInputEncoder(spec.layout, spec.torso, spec.discrete)
        self.heads = ActorCritic(
            ActorCriticSpec(
                self.encoder.features, spec.action_dim, spec.distribution, spec.hidden_sizes
            )
        )
        self.spec = self.heads.spec

    @property
    def log_std(self) -> torch.Tensor:
        """A Gaussian's learned log standard deviation."""
        return self.heads.log_std

    def forward(self, observation: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's output and the value ``[B]`` of the shared features."""
        return self.heads(self.encoder(observation))

    def critic(self, observation: Any) -> torch.Tensor:
        """The value ``[B, 1]``."""
        return self.heads.critic(self.encoder(observation))

    def distribution(self, out: torch.Tensor) -> torch.distributions.Distribution:
        """The action distribution of the actor's output."""
        return self.heads.distribution(out)


def batch_size(observation: Any) -> int:
    """Rows of an observation batch: an array/tensor or a mapping of them."""
    if isinstance(observation, Mapping) or hasattr(observation, "keys"):
        return len(next(iter(observation.values())))
    return len(observation)
