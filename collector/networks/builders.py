"""The network registry: a spec name in a recipe -> the builder of that spec for the env's spaces.

An algorithm's recipe (``services.config.recipes``) names its network as it names its loop and
loss: ``network`` for flat observations and, where it takes stacked frames, ``pixel_network``.
The driver fills :class:`NetworkOptions` from the run's config and calls
``NETWORKS[name](options, observation_space, action_space)`` once; the spec it returns
(a :class:`~collector.networks.NetworkSpec`) goes to collectors, learners and the evaluator.

    * ``q_mlp``: :class:`~collector.networks.q_mlp.ModelSpec` (DQN);
    * ``cnn_q``: :class:`~collector.networks.cnn.PixelQSpec` (DQN on stacked frames);
    * ``actor_critic``: :class:`~collector.networks.actor_critic.ActorCriticSpec`, categorical
      for a ``Discrete`` action space, Gaussian for a ``Box``, factorised categoricals for a
      ``MultiDiscrete``, Bernoullis for a ``MultiBinary`` (PPO, A2C, REINFORCE, IMPALA, APPO);
    * ``cnn_actor_critic``: :class:`~collector.networks.cnn.PixelActorCriticSpec` (PPO, A2C on
      stacked frames);
    * ``squashed``: :class:`~collector.networks.squashed.SquashedGaussianSpec` (SAC);
    * ``recurrent_q``, ``recurrent_actor_critic``, ``recurrent_squashed``: the recurrent twins
      (:mod:`collector.networks.twins`);
    * ``agents``: :class:`~collector.networks.agents.AgentQSpec` (IQL, VDN, QMIX);
    * ``multi_input_q``, ``multi_input_actor_critic``: the same over structured observations
      (``Dict``/``Tuple``, ``Discrete``, ``MultiBinary``, ``Box`` of any rank), the per-key
      encoder of :mod:`collector.networks.encoders` before the heads; a recipe's ``network``
      maps to them through :data:`MULTI_INPUT` (see :func:`network_for_space`).

A builder refuses spaces it cannot serve with a ``ValueError`` naming the config field
(``collector.env_id: ...``). This module imports no torch (each builder imports its spec's
module on use), so a config is validated without it.

Examples:
    >>> import gymnasium as gym
    >>> options = NetworkOptions(env_id="CartPole-v1", hidden_sizes=(32,))
    >>> spec = NETWORKS["q_mlp"](options, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    >>> spec.obs_dim, spec.num_actions, spec.hidden_sizes
    (4, 2, (32,))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from collector.networks import NetworkSpec


@dataclasses.dataclass(frozen=True)
class NetworkOptions:
    """What a builder reads besides the env's spaces (filled from the run's config).

    Attributes:
        env_id: The env (``collector.env_id``), named in refusals.
        hidden_sizes: Hidden widths of the MLPs (``learner.hidden_sizes``).
        dueling: Dueling Q heads (``learner.dueling``).
        pixel_torso: ``nature`` or ``impala``, the CNN torso over frames
            (``learner.pixel_torso``).
        prev_action: Agents also see their previous action (``learner.marl.prev_action``).
        global_state: The multi-agent wrapper's state source (``collector.global_state``).
        action_noise: The color of a Gaussian policy's noise (``collector.action_noise``).
        discrete_encoding: ``one_hot`` or ``embedding``, the multi-input encoder's treatment of
            discrete observation keys.
        recurrent: ``none``, ``lstm`` or ``gru`` (``learner.recurrent``).
        recurrent_hidden_size: The recurrent core's units (``learner.recurrent_hidden_size``).
    """

    env_id: str
    hidden_sizes: tuple[int, ...] = (128, 128)
    dueling: bool = False
    pixel_torso: str = "nature"
    prev_action: bool = False
    global_state: str = "auto"
    action_noise: str = "white"
    discrete_encoding: str = "one_hot"
    recurrent: str = "none"
    recurrent_hidden_size: int = 128


NetworkBuilder = Callable[[NetworkOptions, gym.Space, gym.Space], NetworkSpec]


def is_pixels(obs_space: gym.Space) -> bool:
    """Whether observations are stacked uint8 frames ``[S, H, W]`` (e.g. ``collector.atari``)."""
    return (
        isinstance(obs_space, gym.spaces.Box)
        and len(obs_space.shape) == 3
        and obs_space.dtype == np.uint8
    )


def is_agent_spaces(obs_space: gym.Space, action_space: gym.Space) -> bool:
    """Whether the spaces are the multi-agent wrapper's (``collector.envs.multiagent``).

    That is a ``Dict`` with an ``observation`` entry ``[n_agents, obs]`` and ``MultiDiscrete``
    actions.
    """
    return (
        isinstance(obs_space, gym.spaces.Dict)
        and "observation" in obs_space.spaces
        and isinstance(action_space, gym.spaces.MultiDiscrete)
    )


def flat_obs_dim(env_id: str, obs_space: gym.Space) -> int:
    """The size of a flat ``Box`` observation, the input of the MLP networks.

    Raises:
        ValueError: Naming ``collector.env_id`` if the observation is not a flat ``Box``.
    """
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(
            f"collector.env_id: the MLP networks need a flat Box observation, "
            f"{env_id} has {obs_space}"
        )
    return int(obs_space.shape[0])


def q_mlp(options: NetworkOptions, obs_space: gym.Space, action_space: gym.Space) -> NetworkSpec:
    """An MLP Q-network over a flat observation, one output per discrete action."""
    from collector.networks.q_mlp import ModelSpec

    obs_dim = flat_obs_dim(options.env_id, obs_space)
    return ModelSpec(obs_dim, int(action_space.n), options.hidden_sizes, dueling=options.dueling)


def cnn_q(options: NetworkOptions, obs_space: gym.Space, action_space: gym.Space) -> NetworkSpec:
    """A Q-network with a CNN torso over stacked frames."""
    from collector.networks.cnn import PixelQSpec

    stack, height, width = (int(x) for x in obs_space.shape)
    return PixelQSpec(
        stack, height, width, int(action_space.n), options.pixel_torso, options.dueling
    )


def actor_critic(
    options: NetworkOptions, obs_space: gym.Space, action_space: gym.Space
) -> NetworkSpec:
    """A categorical (``Discrete`` actions) or Gaussian (``Box``) actor-critic MLP."""
    from collector.networks.actor_critic import ActorCriticSpec

    obs_dim = flat_obs_dim(options.env_id, obs_space)
    if isinstance(action_space, gym.spaces.Discrete):
        return ActorCriticSpec(obs_dim, int(action_space.n), "categorical", options.hidden_sizes)
    if isinstance(action_space, gym.spaces.MultiDiscrete):  # collector.networks.distributions
        nvec = tuple(int(n) for n in action_space.nvec)
        return ActorCriticSpec(
            obs_dim, sum(nvec), "multi_categorical", options.hidden_sizes, nvec=nvec
        )
    if isinstance(action_space, gym.spaces.MultiBinary):
        return ActorCriticSpec(obs_dim, int(action_space.n), "bernoulli", options.hidden_sizes)
    return ActorCriticSpec(
        obs_dim,
        int(action_space.shape[0]),
        "gaussian",
        options.hidden_sizes,
        **noise_fields(options),
    )


def cnn_actor_critic(
    options: NetworkOptions, obs_space: gym.Space, action_space: gym.Space
) -> NetworkSpec:
    """A categorical actor-critic with a CNN torso over stacked frames."""
    from collector.networks.cnn import PixelActorCriticSpec

    stack, height, width = (int(x) for x in obs_space.shape)
    return PixelActorCriticSpec(stack, height, width, int(action_space.n), options.pixel_torso)


def squashed(options: NetworkOptions, obs_space: gym.Space, action_space: gym.Space) -> NetworkSpec:
    """SAC's tanh-Gaussian actor, squashed into the ``Box`` action space's bounds."""
    from collector.networks.squashed import SquashedGaussianSpec

    obs_dim = flat_obs_dim(options.env_id, obs_space)
    return SquashedGaussianSpec(
        obs_dim,
        int(action_space.shape[0]),
        tuple(float(x) for x in action_space.low),
        tuple(float(x) for x in action_space.high),
        options.hidden_sizes,
        **noise_fields(options),
    )


def noise_fields(options: NetworkOptions) -> dict:
    """A Gaussian policy's ``noise_beta`` and ``noise_horizon`` (``collector.action_noise``)."""
    from collector.noise import COLORS

    return {
        "noise_beta": COLORS[options.action_noise],
        "noise_horizon": episode_steps(options.env_id),
    }


def episode_steps(env_id: str, default: int = 1000) -> int:
    """The time limit of a registered gymnasium env, else ``default`` (factories, no limit).

    Examples:
        >>> episode_steps("MountainCarContinuous-v0"), episode_steps("pkg.mod:make_env")
        (999, 1000)
    """
    from collector.envs.vector import gym_id, is_factory_path

    if is_factory_path(env_id):
        return default
    try:
        steps = gym.spec(gym_id(env_id)).max_episode_steps
    except gym.error.Error:
        return default
    return int(steps) if steps and steps > 1 else default


def agents(options: NetworkOptions, obs_space: gym.Space, action_space: gym.Space) -> NetworkSpec:
    """The parameter-shared agent Q-network for the multi-agent wrapper's spaces.

    Raises:
        ValueError: Naming ``collector.env_id`` unless :func:`is_agent_spaces`.
    """
    from collector.networks.agents import AgentQSpec

    if not is_agent_spaces(obs_space, action_space):
        raise ValueError(
            f"collector.env_id: the agent network needs a PettingZoo parallel env, "
            f"{options.env_id} has {obs_space} and {action_space}"
        )
    n_agents, width = obs_space["observation"].shape
    num_actions = int(action_space.nvec[0])
    state = obs_space.spaces.get("state")
    return AgentQSpec(
        obs_dim=int(width) - (num_actions if options.prev_action else 0),
        n_agents=int(n_agents),
        num_actions=num_actions,
        state_dim=0 if state is None else int(state.shape[0]),
        hidden_sizes=options.hidden_sizes,
        dueling=options.dueling,
        prev_action=options.prev_action,
        global_state=options.global_state,
    )


def needs_encoder(obs_space: gym.Space) -> bool:
    """Whether observations need the multi-input encoder (anything but a flat ``Box``)."""
    return not (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1)


def multi_input_q(
    options: NetworkOptions, obs_space: gym.Space, action_space: gym.Space
) -> NetworkSpec:
    """A Q-network with the per-key encoder over structured observations."""
    from collector.envs.spaces import describe
    from collector.networks.encoders import MultiInputQSpec

    return MultiInputQSpec(
        describe(obs_space, env_id=options.env_id),
        int(action_space.n),
        options.hidden_sizes,
        dueling=options.dueling,
        torso=options.pixel_torso,
        discrete=options.discrete_encoding,
    )


def multi_input_actor_critic(
    options: NetworkOptions, obs_space: gym.Space, action_space: gym.Space
) -> NetworkSpec:
    """An actor-critic with the per-key encoder over structured observations."""
    from collector.envs.spaces import describe
    from collector.networks.encoders import MultiInputActorCriticSpec

    layout = describe(obs_space, env_id=options.env_id)
    common = {
        "hidden_sizes": options.hidden_sizes,
        "torso": options.pixel_torso,
        "discrete": options.discrete_encoding,
    }
    if isinstance(action_space, gym.spaces.Discrete):
        return MultiInputActorCriticSpec(layout, int(action_space.n), "categorical", **common)
    return MultiInputActorCriticSpec(
        layout,
        int(action_space.shape[0]),
        "gaussian",
        **noise_fields(options),
        **common,
    )


def recurrent_q(
    options: NetworkOptions, obs_space: gym.Space, action_space: gym.Space
) -> NetworkSpec:
    """A recurrent Q-network (``learner.recurrent``) over any observation the encoder takes."""
    from collector.networks.recurrent import RecurrentQSpec

    return RecurrentQSpec(
        *recurrent_fields(options, obs_space),
        num_actions=int(action_space.n),
        dueling=options.dueling,
    )


def recurrent_fields(options: NetworkOptions, obs_space: gym.Space) -> tuple:
    """The leading fields every recurrent spec shares, in order (``_RecurrentFields``)."""
    from collector.envs.spaces import describe

    return (
        describe(obs_space, env_id=options.env_id),
        options.hidden_sizes,
        options.recurrent,
        options.recurrent_hidden_size,
        options.pixel_torso,
        options.discrete_encoding,
    )


def recurrent_actor_critic(
    options: NetworkOptions, obs_space: gym.Space, action_space: gym.Space
) -> NetworkSpec:
    """A recurrent actor-critic (``learner.recurrent``), the action spaces of ``actor_critic``."""
    from collector.networks.recurrent import RecurrentActorCriticSpec

    common = recurrent_fields(options, obs_space)
    if isinstance(action_space, gym.spaces.Discrete):
        return RecurrentActorCriticSpec(*common, action_dim=int(action_space.n))
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        nvec = tuple(int(n) for n in action_space.nvec)
        return RecurrentActorCriticSpec(
            *common, action_dim=sum(nvec), distribution="multi_categorical", nvec=nvec
        )
    if isinstance(action_space, gym.spaces.MultiBinary):
        return RecurrentActorCriticSpec(
            *common, action_dim=int(action_space.n), distribution="bernoulli"
        )
    return RecurrentActorCriticSpec(
        *common,
        action_dim=int(action_space.shape[0]),
        distribution="gaussian",
        **noise_fields(options),
    )


def recurrent_squashed(
    options: NetworkOptions, obs_space: gym.Space, action_space: gym.Space
) -> NetworkSpec:
    """SAC's recurrent actor and twin critics (``learner.recurrent``), ``squashed``'s bounds."""
    from collector.networks.recurrent_squashed import RecurrentSquashedSpec

    base = dataclasses.asdict(squashed(options, obs_space, action_space))
    keep = ("action_dim", "action_low", "action_high", "noise_beta", "noise_horizon")
    return RecurrentSquashedSpec(
        *recurrent_fields(options, obs_space), **{k: base[k] for k in keep}
    )


# A recipe's network over flat observations -> its twin over structured ones.
MULTI_INPUT = {"q_mlp": "multi_input_q", "actor_critic": "multi_input_actor_critic"}


def network_for_space(network: str, obs_space: gym.Space) -> str:
    """``network``'s multi-input twin when the observations need the encoder, else ``network``.

    Examples:
        >>> network_for_space("actor_critic", gym.spaces.Discrete(3))
        'multi_input_actor_critic'
        >>> network_for_space("actor_critic", gym.spaces.Box(-1, 1, (4,)))
        'actor_critic'
    """
    if network in MULTI_INPUT and needs_encoder(obs_space):
        return MULTI_INPUT[network]
    return network


NETWORKS: dict[str, NetworkBuilder] = {
    "q_mlp": q_mlp,
    "cnn_q": cnn_q,
    "actor_critic": actor_critic,
    "cnn_actor_critic": cnn_actor_critic,
    "squashed": squashed,
    "agents": agents,
    "multi_input_q": multi_input_q,
    "multi_input_actor_critic": multi_input_actor_critic,
    "recurrent_q": recurrent_q,
    "recurrent_actor_critic": recurrent_actor_critic,
    "recurrent_squashed": recurrent_squashed,
}
