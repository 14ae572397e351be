"""The networks collectors act with and learners train: one room both sides import.

A run's network is described by a small frozen **spec** that the driver builds once from the
env's spaces and the algorithm's recipe and hands to collectors, learners and the evaluator, so
every process builds the same module and they exchange plain state dicts. The recipe names its
network by a key of ``NETWORKS`` (``builders``), as it names its loop and loss. Every spec
fulfils :class:`NetworkSpec`:

    * ``build() -> nn.Module``: a freshly initialized network (torch's global RNG);
    * ``make_policy(network, seed) -> Policy``: the collector policy over that network, with
      ``act(obs, explore) -> (actions, extras)`` (extras: per-env arrays stored with each
      transition, e.g. ``log_prob`` and ``value``) and ``state_dict``/``load_state_dict`` for
      its RNG;
    * optionally ``make_vector_env(...)`` (the arguments of
      :func:`collector.envs.vector.make_vector_env`) when its policy needs another env interface
      (the multi-agent spec builds PettingZoo envs wrapped by ``collector.envs.multiagent``);
    * ``family``: how losses and policies call its network (``q``, ``actor_critic``,
      ``squashed``, ``agents``; ``contracts``), read by ``learner.network`` and by loaded
      policies (``services.policy``).

The specs:
    * ``q_mlp``: :class:`~collector.networks.q_mlp.ModelSpec`, an MLP Q-network (optionally
      dueling) under epsilon-greedy exploration (DQN);
    * ``actor_critic``: :class:`~collector.networks.actor_critic.ActorCriticSpec`, categorical or
      Gaussian actor-critics (PPO, A2C, REINFORCE);
    * ``squashed``: :class:`~collector.networks.squashed.SquashedGaussianSpec`, SAC's
      tanh-Gaussian actor in the env's bounds;
    * ``cnn``: :class:`~collector.networks.cnn.PixelQSpec` and
      :class:`~collector.networks.cnn.PixelActorCriticSpec`, Nature and IMPALA torsos over
      stacked uint8 frames;
    * ``agents``: :class:`~collector.networks.agents.AgentQSpec`, one parameter-shared agent
      Q-network with per-agent epsilon-greedy (IQL, VDN, QMIX);
    * ``encoders``: :class:`~collector.networks.encoders.MultiInputEncoder`, one encoder per
      observation key (CNN, flatten, one-hot or embedding) concatenated, and the Q-network and
      actor-critic over it for ``Dict``/``Tuple``, ``Discrete``, ``MultiBinary`` and any-rank
      ``Box`` observations;
    * ``common``: exploration parameters, MLP trunks, the dueling head, ``observation_tensor``;
    * ``distributions``: :func:`~collector.networks.distributions.masked_logits` (action
      masks) and the factorised distributions of ``MultiDiscrete`` and ``MultiBinary`` actions;
    * ``builders``: ``NETWORKS``, spec name -> ``builder(options, observation_space,
      action_space)`` with :class:`~collector.networks.builders.NetworkOptions` (no torch
      until a builder runs; refusals name ``collector.env_id``);
    * ``contracts``: each family's ``Protocol`` for a user's network and the probe that checks
      one on a dummy batch (refusals name ``learner.network``);
    * ``custom``: :class:`~collector.networks.custom.CustomNetworkSpec`, a user's
      ``learner.network`` factory in the place of the recipe's network.

Examples:
    >>> import numpy as np
    >>> from collector.networks.q_mlp import ModelSpec
    >>> spec = ModelSpec(obs_dim=4, num_actions=2)
    >>> isinstance(spec, NetworkSpec)
    True
    >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    >>> actions, extras = policy.act(np.zeros((3, 4), np.float32), {"epsilon": 0.0})
    >>> actions.shape, extras
    ((3,), {})
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class NetworkSpec(Protocol):
    """What the driver hands collectors and learners to build the run's network."""

    def build(self) -> Any:
        """Returns a freshly initialized ``nn.Module``."""
        ...

    def make_policy(self, network: Any, seed: Any) -> Any:
        """The collector policy over ``network`` seeded by a ``numpy.random.SeedSequence``."""
        ...
