"""Q-networks over stacked uint8 pixel frames: the Nature-DQN CNN and the IMPALA ResNet.

:class:`PixelQSpec` is the model spec of a DQN run on pixels (``[S, H, W]`` uint8 observations,
e.g. Atari's ``[4, 84, 84]``). Its networks take the uint8 frames as they are stored and
transferred and turn them into floats in ``[0, 1]`` on their own device, so replay, the object
store and a GPU learner's host-to-device copy all move one byte per pixel.

Torsos (``learner.pixel_torso``):

* ``nature``: Mnih et al. (2015): conv 32x8x8/4, 64x4x4/2, 64x3x3/1, then 512 units;
* ``impala``: Espeholt et al. (2018): three stages of conv 3x3, max-pool 3x3/2 and two residual
  blocks (16, 32, 32 channels), then 256 units.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from collector.networks.common import DuelingHead
from collector.networks.q_mlp import EpsilonGreedy
from collector.networks.torsos import TORSOS


class PixelScale(nn.Module):
    """uint8 pixels ``[0, 255]`` to float ``[0, 1]`` (on whatever device the input is)."""

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """Returns ``frames / 255`` as float32."""
        return frames.float().div_(255.0) if frames.dtype == torch.uint8 else frames / 255.0


class ResidualBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))`` with 3x3 convolutions (IMPALA)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output, same shape as ``x``."""
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def nature_torso(channels: int) -> nn.Sequential:
    """The Nature-DQN convolutions (flattened output)."""
    return nn.Sequential(
        nn.Conv2d(channels, 32, 8, stride=4),
        nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1),
        nn.ReLU(),
        nn.Flatten(),
    )


def impala_torso(channels: int, depths: tuple[int, ...] = (16, 32, 32)) -> nn.Sequential:
    """The IMPALA ResNet's stages (flattened output)."""
    layers: list[nn.Module] = []
    for depth in depths:
        layers += [
            nn.Conv2d(channels, depth, 3, padding=1),
            nn.MaxPool2d(3, stride=2, padding=1),
            ResidualBlock(depth),
            ResidualBlock(depth),
        ]
        channels = depth
    return nn.Sequential(*layers, nn.ReLU(), nn.Flatten())


@dataclasses.dataclass(frozen=True)
class PixelQSpec:
    """A Q-network over ``[frame_stack, height, width]`` uint8 frames.

    Attributes:
        frame_stack: Frames per observation (input channels).
        height: Frame height.
        width: Frame width.
        num_actions: Number of discrete actions.
        torso: ``nature`` or ``impala``.
        dueling: Dueling value and advantage heads.

    Examples:
        >>> spec = PixelQSpec(4, 84, 84, 6)
        >>> spec.build()(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape
        torch.Size([2, 6])
    """

    frame_stack: int
    height: int
    width: int
    num_actions: int
    torso: str = "nature"
    dueling: bool = False
    family: ClassVar[str] = "q"  # its contract: collector.networks.contracts

    def __post_init__(self) -> None:
        if self.torso not in TORSOS:
            raise ValueError(f"pixel_torso: must be one of {TORSOS}, got {self.torso!r}")

    def build(self) -> nn.Module:
        """Returns a freshly initialized network (uses torch's global RNG)."""
        if self.torso == "nature":
            torso, hidden = nature_torso(self.frame_stack), 512
        else:
            torso, hidden = impala_torso(self.frame_stack), 256
        with torch.no_grad():
            flat = torso(torch.zeros(1, self.frame_stack, self.height, self.width)).shape[1]
        head = (
            DuelingHead(hidden, self.num_actions)
            if self.dueling
            else nn.Linear(hidden, self.num_actions)
        )
        return nn.Sequential(PixelScale(), torso, nn.Linear(flat, hidden), nn.ReLU(), head)

    def make_policy(self, network: nn.Module, seed: np.random.SeedSequence) -> EpsilonGreedy:
        """Epsilon-greedy over the network (uint8 frames go in as they are)."""
        return EpsilonGreedy(network, self.num_actions, np.random.default_rng(seed))


@dataclasses.dataclass(frozen=True)
class PixelActorCriticSpec:
    """A categorical actor-critic over ``[frame_stack, height, width]`` uint8 frames (PPO, A2C).

    One convolutional torso feeds a policy head (logits) and a value head, as in the PPO Atari
    setups of Schulman et al. (2017) and CleanRL; the collector policy is
    :class:`collector.networks.actor_critic.StochasticActor`, which stores ``log_prob`` and
    ``value``.

    Attributes:
        frame_stack: Frames per observation (input channels).
        height: Frame height.
        width: Frame width.
        num_actions: Number of discrete actions.
        torso: ``nature`` or ``impala``.

    Examples:
        >>> spec = PixelActorCriticSpec(4, 84, 84, 6)
        >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
        >>> actions, extras = policy.act(np.zeros((2, 4, 84, 84), np.uint8), {})
        >>> actions.shape, sorted(extras)
        ((2,), ['log_prob', 'value'])
    """

    frame_stack: int
    height: int
    width: int
    num_actions: int
    torso: str = "nature"
    distribution: str = dataclasses.field(default="categorical", init=False)
    squash: bool = dataclasses.field(default=False, init=False)
    family: ClassVar[str] = "actor_critic"  # its contract: collector.networks.contracts

    def __post_init__(self) -> None:
        if self.torso not in TORSOS:
            raise ValueError(f"pixel_torso: must be one of {TORSOS}, got {self.torso!r}")

    def build(self) -> PixelActorCritic:
        """Returns a freshly initialized module (uses torch's global RNG)."""
        return PixelActorCritic(self)

    def make_policy(self, network: PixelActorCritic, seed: np.random.SeedSequence):
        """The sampling policy collectors run with this module."""
        from collector.networks.actor_critic import StochasticActor

        return StochasticActor(network, seed)


def _orthogonal(layer: nn.Conv2d | nn.Linear, gain: float) -> None:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)


class PixelActorCritic(nn.Module):
    """A shared torso with policy and value heads; ``forward(obs) -> (logits, value)``."""

    def __init__(self, spec: PixelActorCriticSpec) -> None:
        super().__init__()
        self.spec = spec
        if spec.torso == "nature":
            convs, hidden = nature_torso(spec.frame_stack), 512
        else:
            convs, hidden = impala_torso(spec.frame_stack), 256
        with torch.no_grad():
            flat = convs(torch.zeros(1, spec.frame_stack, spec.height, spec.width)).shape[1]
        self.torso = nn.Sequential(PixelScale(), convs, nn.Linear(flat, hidden), nn.ReLU())
        self.policy_head = nn.Linear(hidden, spec.num_actions)
        self.value_head = nn.Linear(hidden, 1)
        # CleanRL's ppo_atari.py (and Baselines' PPO): orthogonal weights, gain sqrt(2) in the
        # Nature torso, 0.01 on the policy head, 1 on the value head, zero biases. With
        # torch's default init the torso's features come out about 30x smaller, so each Adam
        # step barely moves the logits (Pong: approx_kl about 1e-4, no clipping, no learning
        # in 600 k frames). ppo_procgen.py keeps torch's init in the IMPALA torso.
        if spec.torso == "nature":
            for layer in self.torso.modules():
                if isinstance(layer, nn.Conv2d | nn.Linear):
                    _orthogonal(layer, math.sqrt(2))
        _orthogonal(self.policy_head, 0.01)
        _orthogonal(self.value_head, 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the logits ``[n, num_actions]`` and the value ``[n]``."""
        features = self.torso(obs)
        return self.policy_head(features), self.value_head(features).squeeze(-1)

    def critic(self, obs: torch.Tensor) -> torch.Tensor:
        """The value ``[n, 1]`` (the collector bootstraps truncations with it)."""
        return self.value_head(self.torso(obs))

    def distribution(self, logits: torch.Tensor) -> torch.distributions.Categorical:
        """The categorical action distribution of the logits."""
        return torch.distributions.Categorical(logits=logits)
