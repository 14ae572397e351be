"""SAC's actor: a tanh-squashed Gaussian with a state-dependent scale, and its collector policy.

The actor maps an observation to the mean and log standard deviation of a Gaussian over
``u``; the action is ``a = center + half_range * tanh(u)``, inside the env's ``Box`` bounds.
Its log-probability includes the change of variables (Haarnoja et al., 2018, appendix C)::

    log pi(a | s) = log N(u; mu(s), sigma(s)) - sum_i log(half_range_i * (1 - tanh(u_i)^2))

The same :meth:`SquashedGaussianActor.sample` (reparameterized, ``rsample``) serves the learner's
actor loss and, under ``inference_mode``, the collectors. Published weights are the actor's
only: the critics live in the learner's loss module.

With ``noise_beta > 0`` (``collector.action_noise``: ``pink`` or ``red``) the collectors draw the
Gaussian's noise from colored sequences (:mod:`collector.noise`) instead of independently per
step, and the warm-up's random actions are ``tanh`` of the same noise; the learner's samples
stay white.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from collector.networks.common import Explore, exploration, mlp_trunk
from collector.noise import policy_noise

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


@dataclasses.dataclass(frozen=True)
class SquashedGaussianSpec:
    """A tanh-Gaussian actor MLP for a ``Box`` action space.

    Attributes:
        obs_dim: Size of the flat observation.
        action_dim: Action dimensions.
        action_low: Lower bound of each action dimension.
        action_high: Upper bound of each action dimension.
        hidden_sizes: Hidden widths (ReLU).
        noise_beta: The collectors' exploration noise: 0 white (independent per step), 1 pink,
            2 red (:mod:`collector.noise`).
        noise_horizon: Steps per colored noise sequence (the env's episode length).

    Examples:
        >>> spec = SquashedGaussianSpec(3, 1, (-2.0,), (2.0,))
        >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
        >>> actions, _ = policy.act(np.zeros((4, 3), np.float32), {})
        >>> actions.shape, bool(np.abs(actions).max() <= 2.0)
        ((4, 1), True)
    """

    obs_dim: int
    action_dim: int
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    hidden_sizes: tuple[int, ...] = (256, 256)
    noise_beta: float = 0.0
    noise_horizon: int = 1000
    family: ClassVar[str] = "squashed"  # its contract: collector.networks.contracts

    def __post_init__(self) -> None:
        if len(self.action_low) != self.action_dim or len(self.action_high) != self.action_dim:
            raise ValueError("action_low, action_high: need one bound per action dimension")
        if not all(
            math.isfinite(lo) and math.isfinite(hi) and lo < hi
            for lo, hi in zip(self.action_low, self.action_high, strict=True)
        ):
            raise ValueError("action_low, action_high: bounds must be finite with low < high")

    def build(self) -> SquashedGaussianActor:
        """Returns a freshly initialized actor (uses torch's global RNG)."""
        return SquashedGaussianActor(self)

    def make_policy(
        self, network: SquashedGaussianActor, seed: np.random.SeedSequence
    ) -> TanhGaussianPolicy:
        """The sampling policy collectors run with this actor (and this spec's noise)."""
        return TanhGaussianPolicy(
            network, seed, noise_beta=self.noise_beta, horizon=self.noise_horizon
        )


def squashed_sample(
    mean: torch.Tensor,
    log_std: torch.Tensor,
    center: torch.Tensor,
    half_range: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterized ``center + half_range * tanh(u)``, ``u ~ N(mean, exp(log_std))``.

    Returns the action ``[..., action_dim]`` and its log-probability ``[...]`` (the module
    docstring's change of variables); any leading dimensions (``[n]``, ``[B, T]``).
    """
    noise = torch.randn(mean.shape, generator=generator, device=mean.device)
    u = mean + log_std.exp() * noise
    log_prob = (-0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    # log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)), stable for large |u|.
    log_det = 2 * (math.log(2) - u - nn.functional.softplus(-2 * u))
    log_prob = log_prob - (log_det + half_range.log()).sum(-1)
    return center + half_range * torch.tanh(u), log_prob


class SquashedGaussianActor(nn.Module):
    """``obs -> (mean, log_std)`` of the pre-squash Gaussian; see the module docstring.

    Args:
        spec: Sizes and the env's bounds.
        body: A user's module ``obs -> (mean, log_std)`` in place of the MLP
            (``learner.network``, :class:`~collector.networks.contracts.GaussianActorBody`);
            the clamp of ``log_std``, the squashing and the log-probabilities stay these.
    """

    def __init__(self, spec: SquashedGaussianSpec, body: nn.Module | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.body = body
        if body is None:
            self.trunk, width = mlp_trunk(spec.obs_dim, spec.hidden_sizes)
            self.mean = nn.Linear(width, spec.action_dim)
            self.log_std = nn.Linear(width, spec.action_dim)
        low = torch.tensor(spec.action_low, dtype=torch.float32)
        high = torch.tensor(spec.action_high, dtype=torch.float32)
        self.register_buffer("center", (high + low) / 2, persistent=False)
        self.register_buffer("half_range", (high - low) / 2, persistent=False)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and clamped log standard deviation, each ``[n, action_dim]``."""
        if self.body is not None:
            mean, log_std = self.body(obs)
            return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        features = self.trunk(obs)
        log_std = self.log_std(features).clamp(LOG_STD_MIN, LOG_STD_MAX)
        return self.mean(features), log_std

    def sample(
        self, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized action in the env's bounds and its log-probability ``[n]``."""
        mean, log_std = self(obs)
        return squashed_sample(mean, log_std, self.center, self.half_range, generator)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action ``center + half_range * tanh(mean)`` (evaluation)."""
        mean, _ = self(obs)
        return self.center + self.half_range * torch.tanh(mean)


class TanhGaussianPolicy:
    """Collector policy of a :class:`SquashedGaussianActor`.

    Exploration parameters: ``random`` draws uniform actions in the bounds (SAC's warm-up
    during ``init_random_frames``; with colored noise, ``tanh`` of the noise), ``deterministic``
    takes the squashed mean; otherwise the policy samples. No extras are stored (SAC recomputes
    log-probabilities).

    Args:
        network: The actor.
        seed: Seeds the sampling generators.

    Keyword Args:
        noise_beta: The exploration noise's color (0: white, sampled per step).
        horizon: Steps per colored noise sequence.
    """

    def __init__(
        self,
        network: SquashedGaussianActor,
        seed: np.random.SeedSequence,
        *,
        noise_beta: float = 0.0,
        horizon: int = 1000,
    ) -> None:
        self.network = network
        self.spec = network.spec
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(int(seed.generate_state(1)[0]))
        self.low = np.asarray(self.spec.action_low, dtype=np.float32)
        self.high = np.asarray(self.spec.action_high, dtype=np.float32)
        self.noise = policy_noise(noise_beta, horizon, seed)

    def act(self, obs: np.ndarray, explore: Explore = None) -> tuple[np.ndarray, dict]:
        """Returns float32 actions ``[n, action_dim]`` and no extras."""
        params = exploration(explore)
        n, dim = obs.shape[0], self.spec.action_dim
        deterministic = params.get("deterministic")
        colored = None if deterministic or self.noise is None else self.noise.sample(n, dim)
        if params.get("random"):
            if colored is not None:
                center, half_range = (self.high + self.low) / 2, (self.high - self.low) / 2
                return (center + half_range * np.tanh(colored)).astype(np.float32), {}
            actions = self.rng.uniform(self.low, self.high, size=(n, dim))
            return actions.astype(np.float32), {}
        with torch.inference_mode():
            x = torch.as_tensor(obs, dtype=torch.float32)
            if deterministic:
                actions = self.network.mode(x)
            elif colored is not None:
                mean, log_std = self.network(x)
                u = mean + log_std.exp() * torch.from_numpy(colored)
                actions = self.network.center + self.network.half_range * torch.tanh(u)
            else:
                actions, _ = self.network.sample(x, self.generator)
        return actions.numpy(), {}

    def state_dict(self) -> dict:
        """Both generators' states (and the colored noise's, if any)."""
        state = {
            "numpy_rng": self.rng.bit_generator.state,
            "torch_rng": self.generator.get_state().numpy(),
        }
        if self.noise is not None:
            state["noise"] = self.noise.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores both generators (and the colored noise, when both have one)."""
        self.rng.bit_generator.state = state["numpy_rng"]
        self.generator.set_state(torch.tensor(np.asarray(state["torch_rng"]), dtype=torch.uint8))
        if self.noise is not None and "noise" in state:
            self.noise.load_state_dict(state["noise"])
