"""A user's network in the place of the recipe's: the spec of ``learner.network: module:function``.

:class:`CustomNetworkSpec` holds the factory and the built-in spec the recipe would have used
(its ``base``: the family, sizes, the env's bounds, the env interface), so it is a
:class:`~collector.networks.NetworkSpec` like the others: the driver builds it once and hands
it to collectors, learners and the evaluator; each calls ``build()``, which calls
``factory(observation_space, action_space, config)``. The factory travels by reference (its
module is imported where the spec is unpickled), the same way a ``collector.env_id`` factory
does.

Per family (``collector.networks.contracts``), ``build()`` returns:

* ``q``, ``actor_critic``, ``recurrent_q`` and ``recurrent_actor_critic`` (``learner.recurrent``
  set; the state protocol of :mod:`collector.networks.recurrent_contracts`): the user's module
  itself;
* ``squashed``: a :class:`~collector.networks.squashed.SquashedGaussianActor` whose ``body`` is
  the user's module (relayrl squashes into the bounds and computes log-probabilities);
* ``agents``: an :class:`~collector.networks.agents.AgentQNetwork` whose ``q`` is the user's
  per-agent module (relayrl appends the agent id).

The collector policies are the base spec's, except for actor-critics, which sample from the
user's ``distribution(out)`` (:class:`DistributionActor`; a recurrent one through
:class:`~collector.networks.stepping.RecurrentPolicy`, one step at a time with a state per env).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from collector.networks.actor_critic import StochasticActor
from collector.networks.common import observation_tensor
from collector.noise import policy_noise


@dataclasses.dataclass(frozen=True)
class CustomNetworkSpec:
    """A user's network factory standing in for a built-in spec.

    Attributes:
        factory: ``factory(observation_space, action_space, config) -> nn.Module``.
        name: The factory's ``module:function`` (``learner.network``), named in messages.
        base: The built-in spec of the run's recipe for these spaces.
        observation_space: The env's observation space (the multi-agent wrapper's).
        action_space: The env's action space.
        config: The run's ``LearnerConfig``, handed to the factory.

    Examples:
        >>> import gymnasium as gym
        >>> from collector.networks.q_mlp import ModelSpec
        >>> def factory(observation_space, action_space, config):
        ...     return nn.Linear(observation_space.shape[0], int(action_space.n))
        >>> spec = CustomNetworkSpec(factory, "mine:factory", ModelSpec(4, 2),
        ...                          gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
        >>> spec.family, type(spec.build()).__name__
        ('q', 'Linear')
        >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
        >>> policy.act(np.zeros((3, 4), np.float32), {"deterministic": True})[0].shape
        (3,)
    """

    factory: Callable[..., nn.Module]
    name: str
    base: Any
    observation_space: gym.Space
    action_space: gym.Space
    config: Any = None

    @property
    def family(self) -> str:
        """The base spec's family (``q``, ``actor_critic``, ``squashed``, ``agents``, ...)."""
        return self.base.family

    def build(self) -> nn.Module:
        """Calls the factory and wraps its module as the family needs (module docstring).

        Raises:
            TypeError: Naming ``learner.network`` if the factory returns no ``nn.Module``.
        """
        module = self.factory(self.observation_space, self.action_space, self.config)
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"learner.network: {self.name} returned a {type(module).__name__}, "
                "not a torch.nn.Module"
            )
        if self.family == "squashed":
            from collector.networks.squashed import SquashedGaussianActor

            return SquashedGaussianActor(self.base, body=module)
        if self.family == "agents":
            from collector.networks.agents import AgentQNetwork

            return AgentQNetwork(self.base, q=module)
        return module

    def make_policy(self, network: nn.Module, seed: np.random.SeedSequence):
        """The collector policy over ``network``: the base spec's, or a sampler of ``out``."""
        if self.family == "actor_critic":
            return DistributionActor(network, seed, self.base)
        if self.family == "recurrent_actor_critic":
            from collector.networks.stepping import RecurrentPolicy, StepView

            view = StepView(network)
            return RecurrentPolicy(DistributionActor(view, seed, _step_spec(self.base)), view)
        return self.base.make_policy(network, seed)

    @property
    def make_vector_env(self):
        """The base spec's env builder (multi-agent); an ``AttributeError`` for the others.

        Collectors ask ``hasattr(spec, "make_vector_env")``, which this keeps true exactly when
        the base spec has one.
        """
        return self.base.make_vector_env


class DistributionActor(StochasticActor):
    """:class:`~collector.networks.actor_critic.StochasticActor` over a user's actor-critic.

    Categorical actions sample the logits ``out`` as the built-in one does; Gaussian ones take
    the mean and standard deviation of ``network.distribution(out)`` (reparameterized with the
    policy's own generator, or the colored noise of ``collector.action_noise``) and its
    ``log_prob``; values come from ``forward``.

    Args:
        network: The user's module (``collector.networks.contracts.ActorCriticNetwork``).
        seed: Seeds the sampling generator.
        spec: The base spec (its ``distribution`` and ``squash``).
    """

    def __init__(self, network: nn.Module, seed: np.random.SeedSequence, spec) -> None:
        self.network = network
        self.spec = spec
        self.generator = torch.Generator().manual_seed(int(seed.generate_state(1)[0]))
        self.noise = policy_noise(spec.noise_beta, spec.noise_horizon, seed)

    def value(self, obs: np.ndarray) -> np.ndarray:
        """The value ``[n]`` of each observation (``forward``'s second output)."""
        with torch.inference_mode():
            return self.network(observation_tensor(obs))[1].numpy()

    def _gaussian(self, mean: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        distribution = self.network.distribution(mean)
        if self.noise is not None:  # colored noise (collector.action_noise), as the built-in
            noise = torch.from_numpy(self.noise.sample(*mean.shape))
        else:
            noise = torch.randn(mean.shape, generator=self.generator)
        sample = distribution.mean + distribution.stddev * noise
        return sample, distribution.log_prob(sample)


def _step_spec(base):
    """The feed-forward actor-critic spec of one step of a recurrent one (its distribution)."""
    from collector.networks.actor_critic import ActorCriticSpec

    return ActorCriticSpec(
        base.recurrent_hidden_size,
        base.action_dim,
        base.distribution,
        (),
        nvec=base.nvec,
        noise_beta=base.noise_beta,
        noise_horizon=base.noise_horizon,
    )
