"""What a user's network (``learner.network: module:function``) must do, family by family.

A run's recipe fixes the network's **family**, read from the built-in spec it names
(``ModelSpec.family`` and so on): the loss and the collector policy of that family call the
network in one way, and a user's network is called the same way. The factory is called as
``factory(observation_space, action_space, config)`` (the env's gymnasium spaces, the run's
``LearnerConfig``) and returns an ``nn.Module``; the contracts below are what the losses in
``learner/losses/`` and the collector policies read (``docs/networks.md`` has a worked example of
each). Observations arrive as the env gives them: float32 ``[B, *obs_shape]``, or uint8 stacked
frames ``[B, S, H, W]`` for pixel envs (the network scales them). A ``Dict``/``Tuple``
observation arrives as a mapping ``{key path: [B, *shape]}`` (``image``, ``pos.0``; a
``TensorDict`` in the learner, a ``dict`` in collectors: index it by key), each key in its
stored dtype (uint8 images, int64 ``Discrete``, int8 ``MultiBinary``, float32 ``Box``;
``collector.envs.spaces``).

* ``q`` (e.g. ``dqn``): :class:`QValues`.
* ``actor_critic`` (e.g. ``ppo``, ``a2c``, ``reinforce``): :class:`ActorCriticNetwork`.
* ``squashed`` (e.g. ``sac``): :class:`GaussianActorBody`, optionally with ``make_critic()``
  making a :class:`QCritic` (relayrl builds the twin critics and their targets from it).
* ``agents`` (e.g. ``iql``, ``vdn``, ``qmix``): :class:`AgentQValues`, one parameter-shared
  per-agent network.
* ``recurrent_q`` and ``recurrent_actor_critic`` (``learner.recurrent`` set): the state protocol,
  :mod:`collector.networks.recurrent_contracts`.

Which family an algorithm uses is its registration's network (``learner.algorithms``).

:func:`probe` checks a built network on a dummy batch before any actor starts; a wrong shape is
refused naming ``learner.network``, the factory and the shape.

Examples:
    >>> import gymnasium as gym
    >>> from collector.networks.q_mlp import ModelSpec
    >>> spec = ModelSpec(obs_dim=4, num_actions=2)
    >>> box, two = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    >>> probe(spec.family, spec.build(), box, two)
    >>> try:
    ...     probe("q", torch.nn.Linear(4, 3), box, two, name="mine:net", algorithm="dqn")
    ... except ValueError as err:
    ...     print(err)
    learner.network: mine:net maps observations [2, 4] to [2, 3]; dqn needs Q-values [2, 2] (one
    per action of Discrete(2))
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from collector.networks.recurrent_contracts import (
    RECURRENT_FAMILIES,
    STEPS,
    check_recurrent,
    sequences,
)

FAMILIES = ("q", "actor_critic", "squashed", "agents", *RECURRENT_FAMILIES)


@runtime_checkable
class QValues(Protocol):
    """DQN's network: observations ``[B, *obs_shape]`` to Q-values ``[B, n_actions]``.

    Greedy actions are the argmax; the target network is a deep copy of it.
    """

    def __call__(self, observation: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, n_actions]``."""
        ...


@runtime_checkable
class ActorCriticNetwork(Protocol):
    """PPO's, A2C's and REINFORCE's network: the action distribution's parameters and a value.

    ``forward(observation)`` returns ``(out, value)``: for a ``Discrete`` action space ``out``
    is the logits ``[B, n_actions]`` and ``distribution(out)`` a ``Categorical`` of them; for a
    ``Box`` ``out`` is the mean ``[B, action_dim]`` and ``distribution(out)`` a diagonal
    Gaussian (``Normal`` or ``Independent(Normal)``) whose ``log_prob`` of an action is
    ``[B]``. ``value`` is ``[B]``. Deterministic actions are the argmax of the logits or the
    mean (clipped to the bounds).
    """

    def __call__(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(out, value)``: logits or mean, and the value ``[B]``."""
        ...

    def distribution(self, out: torch.Tensor) -> torch.distributions.Distribution:
        """The action distribution of ``out``."""
        ...


@runtime_checkable
class GaussianActorBody(Protocol):
    """SAC's actor: observations to the mean and log standard deviation of a Gaussian over ``u``.

    Both are ``[B, action_dim]``; relayrl clamps ``log_std`` to ``[-5, 2]``, squashes
    ``a = center + half_range * tanh(u)`` into the env's bounds and computes the log-probability
    with the change of variables (``collector.networks.squashed``). Optionally the module has
    ``make_critic() -> nn.Module``, a fresh :class:`QCritic`; relayrl calls it twice for the twin
    critics (else MLP critics of ``learner.sac.critic_hidden_sizes``).
    """

    def __call__(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)``, each ``[B, action_dim]``."""
        ...


@runtime_checkable
class QCritic(Protocol):
    """SAC's critic: ``(observation [B, obs_dim], action [B, action_dim]) -> Q [B]``."""

    def __call__(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B]``."""
        ...


@runtime_checkable
class AgentQValues(Protocol):
    """The multi-agent network, shared by every agent: ``[..., in_features] -> [..., n_actions]``.

    ``in_features`` is one agent's observation width (``observation_space["observation"]
    .shape[-1]``, previous-action one-hot included with ``learner.marl.prev_action``) plus
    ``n_agents``: relayrl appends the one-hot of the agent's index, and the mixers (VDN, QMIX)
    combine the agents' Q-values.
    """

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        """Per-agent Q-values ``[..., n_actions]``."""
        ...


def dummy_observation(space: gym.Space, batch: int):
    """A zero batch ``[batch, *shape]`` of the observations (the multi-agent ``observation``).

    A flattened ``Dict``/``Tuple`` observation (``collector.envs.spaces``) is a dict of such
    batches keyed by path, each in its stored dtype; a network receives it as a mapping.
    """
    from collector.envs.spaces import ObservationDict

    if isinstance(space, ObservationDict):
        return {
            key: torch.zeros(
                (batch, *sub.shape), dtype=torch.from_numpy(np.zeros(0, sub.dtype)).dtype
            )
            for key, sub in space.spaces.items()
        }
    if isinstance(space, gym.spaces.Dict):
        space = space["observation"]
    dtype = torch.uint8 if space.dtype == np.uint8 else torch.float32
    return torch.zeros((batch, *space.shape), dtype=dtype)


def probe(
    family: str,
    network: nn.Module,
    observation_space: gym.Space,
    action_space: gym.Space,
    *,
    name: str = "the factory",
    algorithm: str | None = None,
    batch: int = 2,
) -> None:
    """Runs ``network`` (as the run builds it) on a dummy batch and checks its family's shapes.

    Args:
        family: One of :data:`FAMILIES`.
        network: The built network (for ``squashed`` and ``agents`` relayrl's wrapper around
            the user's module).
        observation_space: The env's observation space.
        action_space: The env's action space.
        name: The factory's ``module:function`` (named in refusals).
        algorithm: The run's algorithm (named in refusals; None: the family).
        batch: Rows of the dummy batch.

    Raises:
        ValueError: Naming ``learner.network``, the factory and the shape expected.
    """
    obs = dummy_observation(observation_space, batch)
    if family in RECURRENT_FAMILIES:  # sequences [batch, STEPS, ...]
        obs = sequences(dummy_observation(observation_space, batch * STEPS), STEPS)
    where = f"learner.network: {name}"
    need = algorithm or f"the {family} family"
    if family not in RECURRENT_FAMILIES and callable(getattr(network, "initial_state", None)):
        raise ValueError(
            f"{where} is a recurrent network (it has initial_state); set learner.recurrent "
            f"(lstm or gru) so that {need} trains it with its state"
        )
    try:
        with torch.no_grad():
            if family in RECURRENT_FAMILIES:
                check_recurrent(family, network, obs, action_space, where, need)
            elif family == "q":
                _check_q(network(obs), obs, action_space, where, need)
            elif family == "actor_critic":
                _check_actor_critic(network, obs, action_space, where)
            elif family == "squashed":
                _check_squashed(network, obs, action_space, where, need)
            else:
                _check_agents(network(obs), obs, action_space, where, need)
    except (RuntimeError, TypeError, AttributeError, NotImplementedError) as err:
        raise ValueError(
            f"{where} fails on a batch of observations {_shape(obs)}: {type(err).__name__}: {err}"
        ) from None


def _shape(tensor) -> str:
    if isinstance(tensor, dict):
        return "{" + ", ".join(f"{k}: {_shape(v)}" for k, v in tensor.items()) + "}"
    if not isinstance(tensor, torch.Tensor):
        return f"a {type(tensor).__name__}"
    return str(list(tensor.shape))


def _rows(obs) -> int:
    return len(next(iter(obs.values()))) if isinstance(obs, dict) else obs.shape[0]


def _check_q(q, obs, action_space, where, need) -> None:
    n = _rows(obs)
    if not isinstance(q, torch.Tensor) or tuple(q.shape) != (n, int(action_space.n)):
        raise ValueError(
            f"{where} maps observations {_shape(obs)} to {_shape(q)}; {need} needs Q-values "
            f"[{n}, {int(action_space.n)}] (one per action of {action_space})"
        )


def _pair(result, obs, where, what) -> tuple[torch.Tensor, torch.Tensor]:
    if not (
        isinstance(result, tuple | list)
        and len(result) == 2
        and all(isinstance(x, torch.Tensor) for x in result)
    ):
        raise ValueError(
            f"{where} maps observations {_shape(obs)} to {type(result).__name__}; "
            f"needs a pair of tensors {what}"
        )
    return result[0], result[1]


def _check_actor_critic(network, obs, action_space, where) -> None:
    n = _rows(obs)
    discrete = isinstance(action_space, gym.spaces.Discrete)
    width = int(action_space.n) if discrete else int(action_space.shape[0])
    what = "(logits, value)" if discrete else "(mean, value)"
    out, value = _pair(network(obs), obs, where, what)
    if tuple(out.shape) != (n, width):
        kind = "logits" if discrete else "the mean action"
        raise ValueError(
            f"{where} gives {kind} of shape {_shape(out)} for observations {_shape(obs)}; "
            f"needs [{n}, {width}] for {action_space}"
        )
    if tuple(value.shape) != (n,):
        raise ValueError(
            f"{where} gives values of shape {_shape(value)} for observations {_shape(obs)}; "
            f"needs [{n}] (one per observation)"
        )
    distribution = network.distribution(out)
    base = getattr(distribution, "base_dist", distribution)
    expected = torch.distributions.Categorical if discrete else torch.distributions.Normal
    if not isinstance(base, expected):
        raise ValueError(
            f"{where}: distribution(out) is a {type(distribution).__name__}; {action_space} "
            f"needs a {expected.__name__}"
        )
    action = out.argmax(-1) if discrete else out
    log_prob = distribution.log_prob(action)
    if tuple(log_prob.shape) != (n,):
        raise ValueError(
            f"{where}: distribution(out).log_prob(action) has shape {_shape(log_prob)}; "
            f"needs [{n}] (a Gaussian over {width} dimensions is Independent(Normal(...), 1))"
        )


def _check_squashed(actor, obs, action_space, where, need) -> None:
    n, width = obs.shape[0], int(action_space.shape[0])
    body = actor.body
    mean, log_std = _pair(body(obs), obs, where, "(mean, log_std)")
    for label, tensor in (("mean", mean), ("log_std", log_std)):
        if tuple(tensor.shape) != (n, width):
            raise ValueError(
                f"{where} gives a {label} of shape {_shape(tensor)} for observations "
                f"{_shape(obs)}; {need} needs [{n}, {width}] for {action_space}"
            )
    make_critic = getattr(body, "make_critic", None)
    if make_critic is None:
        return
    q = make_critic()(obs, actor.mode(obs))
    if not isinstance(q, torch.Tensor) or tuple(q.shape) != (n,):
        raise ValueError(
            f"{where}: make_critic() maps observations {_shape(obs)} and actions "
            f"[{n}, {width}] to {_shape(q)}; needs Q-values [{n}]"
        )


def _check_agents(q, obs, action_space, where, need) -> None:
    n, agents = obs.shape[0], obs.shape[1]
    actions = int(action_space.nvec[0])
    if not isinstance(q, torch.Tensor) or tuple(q.shape) != (n, agents, actions):
        features = obs.shape[-1] + agents
        raise ValueError(
            f"{where} maps agent features [{n}, {agents}, {features}] to {_shape(q)}; "
            f"{need} needs Q-values [{n}, {agents}, {actions}] (one per action of each agent)"
        )
