"""Stochastic actor-critics for policy-gradient learners (PPO, A2C, REINFORCE).

An :class:`ActorCriticSpec` builds an :class:`ActorCritic` module (an actor MLP and a critic MLP,
CleanRL style: tanh activations, orthogonal initialization with a small actor output layer) and
the matching collector policy. Each step the policy samples actions from its distribution and
returns, per env, the action's ``log_prob`` under the sampling policy and the critic's ``value``
of the observation; the collector stores both with the transition, so the learner can form
importance ratios (PPO) and the collector advantages (GAE, returns-to-go). SAC's tanh-Gaussian
actor with a state-dependent scale lives in ``collector.networks.squashed``.

Distributions:
    * ``categorical``: logits over ``action_dim`` discrete actions.
    * ``multi_categorical``: ``MultiDiscrete(nvec)`` actions, one categorical per dimension over
      its slice of ``action_dim = sum(nvec)`` logits (``collector.networks.distributions``).
    * ``bernoulli``: ``MultiBinary(action_dim)`` actions, one Bernoulli per bit.
    * ``gaussian``: diagonal Gaussian with a state-independent, learned ``log_std``. With
      ``squash=True`` the sample goes through ``tanh`` (SAC style) and the log-probability
      includes the change of variables; rescale to the env's bounds with gymnasium's
      ``RescaleAction`` wrapper. Unsquashed actions are stored as sampled; the collector clips
      only what it hands to a ``Box`` env.

Masks (``collector.action_mask_key``, ``collector.envs.masks``): ``act(obs, explore, mask=...)``
sets the forbidden logits to the minimum before sampling (categorical and multi-categorical).

Sampling uses a per-collector ``torch.Generator``, so runs are reproducible and its state is
part of the collector's ``state_dict``. A Gaussian's noise may be colored instead
(``noise_beta > 0``, ``collector.action_noise``: :mod:`collector.noise`): each step is still a
standard normal draw, so ``log_prob`` is the same density, but steps are correlated in time.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from collector.networks.common import Explore, exploration, observation_tensor
from collector.networks.distributions import MultiBernoulli, MultiCategorical, masked_logits
from collector.noise import policy_noise

DISTRIBUTIONS = ("categorical", "gaussian", "multi_categorical", "bernoulli")
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _mlp(sizes: list[int], out_gain: float = 1.0) -> nn.Sequential:
    """Tanh MLP with orthogonal weights (gain sqrt(2), ``out_gain`` on the output layer)."""
    layers: list[nn.Module] = []
    for width, out in itertools.pairwise(sizes):
        linear = nn.Linear(width, out)
        nn.init.orthogonal_(linear.weight, math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear, nn.Tanh()]
    nn.init.orthogonal_(layers[-2].weight, out_gain)
    return nn.Sequential(*layers[:-1])  # no activation after the output layer


@dataclasses.dataclass(frozen=True)
class ActorCriticSpec:
    """An actor MLP ``obs -> action distribution`` and a critic MLP ``obs -> value``.

    Attributes:
        obs_dim: Size of the flat observation.
        action_dim: Discrete actions (categorical) or action dimensions (Gaussian).
        distribution: ``categorical`` or ``gaussian``.
        hidden_sizes: Hidden widths of both MLPs.
        log_std_init: Initial ``log_std`` of the Gaussian.
        squash: Pass Gaussian samples through ``tanh``.
        noise_beta: The Gaussian's sampling noise: 0 white (independent per step), 1 pink,
            2 red (:mod:`collector.noise`).
        noise_horizon: Steps per colored noise sequence (the env's episode length).
        nvec: ``multi_categorical``: choices per action dimension (their sum is ``action_dim``).

    Examples:
        >>> spec = ActorCriticSpec(obs_dim=3, action_dim=2, distribution="gaussian")
        >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
        >>> actions, extras = policy.act(np.zeros((4, 3), np.float32), {})
        >>> actions.shape, sorted(extras)
        ((4, 2), ['log_prob', 'value'])
    """

    obs_dim: int
    action_dim: int
    distribution: str = "categorical"
    hidden_sizes: tuple[int, ...] = (64, 64)
    log_std_init: float = 0.0
    squash: bool = False
    noise_beta: float = 0.0
    noise_horizon: int = 1000
    nvec: tuple[int, ...] = ()
    family: ClassVar[str] = "actor_critic"  # its contract: collector.networks.contracts

    def __post_init__(self) -> None:
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(
                f"distribution: must be one of {DISTRIBUTIONS}, got {self.distribution!r}"
            )
        if self.obs_dim < 1 or self.action_dim < 1:
            raise ValueError(
                f"obs_dim, action_dim: must be >= 1, got {self.obs_dim!r}, {self.action_dim!r}"
            )
        if self.distribution == "multi_categorical" and sum(self.nvec) != self.action_dim:
            raise ValueError(f"nvec: must sum to action_dim {self.action_dim}, got {self.nvec!r}")
        if self.squash and self.distribution != "gaussian":
            raise ValueError("squash: applies to the gaussian distribution only, got True")
        if self.noise_beta and self.distribution != "gaussian":
            raise ValueError(f"noise_beta: colors a gaussian's noise only, got {self.noise_beta}")

    def build(self) -> ActorCritic:
        """Returns a freshly initialized module (uses torch's global RNG)."""
        return ActorCritic(self)

    def make_policy(self, network: ActorCritic, seed: np.random.SeedSequence) -> StochasticActor:
        """The sampling policy collectors run with this module (and this spec's noise)."""
        return StochasticActor(
            network, seed, noise_beta=self.noise_beta, horizon=self.noise_horizon
        )


class ActorCritic(nn.Module):
    """Actor and critic MLPs; ``forward(obs) -> (logits or mean, value)``."""

    def __init__(self, spec: ActorCriticSpec) -> None:
        super().__init__()
        self.spec = spec
        hidden = list(spec.hidden_sizes)
        self.actor = _mlp([spec.obs_dim, *hidden, spec.action_dim], out_gain=0.01)
        self.critic = _mlp([spec.obs_dim, *hidden, 1], out_gain=1.0)
        if spec.distribution == "gaussian":
            self.log_std = nn.Parameter(torch.full((spec.action_dim,), float(spec.log_std_init)))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the actor's output (logits or Gaussian mean) and the value ``[n]``."""
        return self.actor(obs), self.critic(obs).squeeze(-1)

    def distribution(self, out: torch.Tensor):
        """The action distribution of the actor's output (unsquashed for a Gaussian)."""
        if self.spec.distribution == "categorical":
            return torch.distributions.Categorical(logits=out)
        if self.spec.distribution == "multi_categorical":
            return MultiCategorical(out, self.spec.nvec)
        if self.spec.distribution == "bernoulli":
            return MultiBernoulli(out)
        if self.spec.squash:
            raise NotImplementedError("squashed Gaussians: use collector.networks.squashed")
        scale = self.log_std.expand_as(out).exp()
        return torch.distributions.Independent(torch.distributions.Normal(out, scale), 1)


class StochasticActor:
    """Samples actions from an :class:`ActorCritic` and reports ``log_prob`` and ``value``.

    Args:
        network: The module; its spec selects the distribution.
        seed: Seeds the sampling generator.

    Keyword Args:
        noise_beta: A Gaussian's noise color (0: white, drawn per step by the generator).
        horizon: Steps per colored noise sequence.
    """

    def __init__(
        self,
        network: ActorCritic,
        seed: np.random.SeedSequence,
        *,
        noise_beta: float = 0.0,
        horizon: int = 1000,
    ) -> None:
        self.network = network
        self.spec = network.spec
        self.generator = torch.Generator().manual_seed(int(seed.generate_state(1)[0]))
        self.noise = policy_noise(noise_beta, horizon, seed)

    def act(
        self, obs: np.ndarray, explore: Explore = None, *, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict]:
        """Samples one action per row (exploration is the sampling itself).

        Args:
            obs: ``[n, obs_dim]`` observations.
            explore: ``{"deterministic": True}`` takes the mode (argmax) or the mean instead of
                sampling (evaluation); an ``epsilon`` is ignored.
            mask: Bool ``[n, action_dim]``, True where an action is allowed (categorical and
                multi-categorical); forbidden actions are never taken.

        Returns:
            ``(actions, {"log_prob": [n] float32, "value": [n] float32})``; actions are int64
            ``[n]`` (categorical) or float32 ``[n, action_dim]`` (Gaussian).
        """
        deterministic = bool(exploration(explore).get("deterministic"))
        with torch.inference_mode():
            out, value = self.network(observation_tensor(obs))
            if mask is not None:
                out = masked_logits(out, torch.as_tensor(mask))
            if deterministic:
                actions, log_prob = self._mode(out)
            elif self.spec.distribution == "categorical":
                actions, log_prob = self._categorical(out)
            elif self.spec.distribution in ("multi_categorical", "bernoulli"):
                distribution = self.network.distribution(out)
                actions = distribution.sample(self.generator)
                log_prob = distribution.log_prob(actions)
            else:
                actions, log_prob = self._gaussian(out)
        extras = {"log_prob": log_prob.numpy(), "value": value.numpy()}
        return actions.numpy(), extras

    def value(self, obs: np.ndarray) -> np.ndarray:
        """The critic's float32 values ``[n]`` of observations (bootstrapping)."""
        with torch.inference_mode():
            value = self.network.critic(observation_tensor(obs)).squeeze(-1)
        return value.numpy()

    def _mode(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.spec.distribution == "categorical":
            return out.argmax(-1), torch.zeros(len(out))
        if self.spec.distribution in ("multi_categorical", "bernoulli"):
            return self.network.distribution(out).mode(), torch.zeros(len(out))
        mean = torch.tanh(out) if self.spec.squash else out
        return mean, torch.zeros(len(out))

    def _categorical(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs = torch.log_softmax(logits, dim=-1)
        actions = torch.multinomial(log_probs.exp(), 1, generator=self.generator)
        return actions.squeeze(-1), log_probs.gather(-1, actions).squeeze(-1)

    def _gaussian(self, mean: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_std = self.network.log_std.expand_as(mean)
        if self.noise is not None:
            noise = torch.from_numpy(self.noise.sample(*mean.shape))
        else:
            noise = torch.randn(mean.shape, generator=self.generator)
        sample = mean + log_std.exp() * noise
        log_prob = (-0.5 * noise.square() - log_std - _LOG_SQRT_2PI).sum(-1)
        if self.spec.squash:
            # d tanh(u)/du = 1 - tanh(u)^2 = 4 / (e^u + e^-u)^2, computed stably.
            log_prob -= (2 * (math.log(2) - sample - nn.functional.softplus(-2 * sample))).sum(-1)
            sample = torch.tanh(sample)
        return sample, log_prob

    def state_dict(self) -> dict:
        """The sampling generator's state (a uint8 array), and the colored noise's if any."""
        state = {"torch_rng": self.generator.get_state().numpy()}
        if self.noise is not None:
            state["noise"] = self.noise.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores the sampling generator (and the colored noise, when both have one)."""
        self.generator.set_state(torch.tensor(np.asarray(state["torch_rng"]), dtype=torch.uint8))
        if self.noise is not None and "noise" in state:
            self.noise.load_state_dict(state["noise"])
