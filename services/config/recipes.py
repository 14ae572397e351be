"""Algorithm recipes: the loop, loss, collector policy and defaults each algorithm stands for.

An algorithm is three choices, not a branch in the controller (``docs/algorithms.md``):

* a **loop** (``services.driver.loops``): ``offpolicy`` (asynchronous collection into
  replay, learner rounds paced by the update-to-data ratio: DQN, SAC) or ``onpolicy``
  (lockstep iterations: collect one batch with the current version into FIFO tables, train
  epochs of minibatches on exactly that batch, publish: PPO, A2C, REINFORCE);
* a **loss** (``learner.losses``), named by ``learner.loss``;
* a **collector policy** (the model spec): epsilon-greedy over a Q-network (DQN), a categorical
  or Gaussian actor-critic (PPO, A2C, REINFORCE; from the env's action space), SAC's
  tanh-Gaussian actor, or per-agent epsilon-greedy over one parameter-shared agent network
  (IQL, VDN, QMIX on PettingZoo parallel envs: ``services.config.multiagent``); on-policy collectors
  also build advantages (GAE) or Monte-Carlo returns.

``algorithm: <name>`` in a config selects a recipe; the recipe's ``defaults`` fill every field
the config leaves unset (so ``--set algorithm=ppo`` alone is a working PPO run), and
:func:`check` refuses combinations that cannot work before any actor starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from collector.config import OnPolicyTransform
from services.config import multiagent

# Algorithms whose networks take stacked uint8 frames [S, H, W] (collector.networks.cnn).
PIXEL_ALGORITHMS = ("dqn", "ppo", "a2c")
SpecBuilder = Callable[[Any, gym.Space, gym.Space], Any]


class AlgorithmConfigError(ValueError):
    """A combination the algorithm cannot run; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One algorithm's recipe.

    Attributes:
        name: The ``algorithm`` value.
        loop: ``offpolicy`` or ``onpolicy``.
        loss: The built-in ``learner.loss`` it trains with.
        actions: Action spaces it accepts: ``discrete``, ``continuous`` or ``any``.
        defaults: Config values (nested like the YAML) used where the config sets none.
        build_spec: ``(config, observation_space, action_space) -> model spec``.
        transform: On-policy collectors' targets: ``gae`` or ``episodes`` (None: off-policy).
        epsilon_greedy: Collectors explore with the driver's annealed epsilon (Q-learning);
            otherwise the policy's own sampling is the exploration.
        multi_agent: Runs on PettingZoo parallel envs (``services.config.multiagent``): agent fields
            carry an agent dimension, and the env's spaces are the multi-agent wrapper's.
    """

    name: str
    loop: str
    loss: str
    actions: str
    defaults: Mapping[str, Any]
    build_spec: SpecBuilder
    transform: str | None = None
    epsilon_greedy: bool = False
    multi_agent: bool = False

    @property
    def on_policy(self) -> bool:
        """Whether it runs the lockstep on-policy loop."""
        return self.loop == "onpolicy"

    def collector_transform(self, config) -> OnPolicyTransform | None:
        """What on-policy collectors build (None for off-policy n-step transitions)."""
        if self.transform is None:
            return None
        return OnPolicyTransform(
            kind=self.transform,
            gamma=config.collector.gamma,
            gae_lambda=config.collector.gae_lambda,
            baseline=config.learner.onpolicy.baseline,
        )

    def exploration(self, config, frames: int) -> dict[str, Any]:
        """Exploration parameters handed to collectors after ``frames`` collected frames.

        Uniform random actions during ``init_random_frames``; then epsilon-greedy's annealed
        epsilon for Q-learning, and the policy's own sampling for stochastic actors.
        """
        if frames < config.controller.init_random_frames:
            return {"random": True, "epsilon": 1.0} if self.epsilon_greedy else {"random": True}
        if self.epsilon_greedy and config.collector.epsilon_schedule == "apex":
            epsilons = config.collector.apex_epsilons()  # each collector takes its own
            return {"epsilon": sum(epsilons) / len(epsilons), "epsilons": epsilons}
        if self.epsilon_greedy:
            return {"epsilon": config.collector.epsilon(frames)}
        return {}


def _flat_box(config, obs_space: gym.Space) -> int:
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise AlgorithmConfigError(
            f"collector.env_id: the MLP networks need a flat Box observation, "
            f"{config.collector.env_id} has {obs_space}"
        )
    return int(obs_space.shape[0])


def _pixels(obs_space: gym.Space) -> bool:
    """Stacked uint8 frames ``[S, H, W]`` (e.g. ``collector.atari``)."""
    return (
        isinstance(obs_space, gym.spaces.Box)
        and len(obs_space.shape) == 3
        and obs_space.dtype == np.uint8
    )


# The spec builders import torch-based modules on use: validating a config needs no torch.
def _q_network(config, obs_space: gym.Space, action_space: gym.Space):
    from collector.networks.q_mlp import ModelSpec

    if _pixels(obs_space):
        from collector.networks.cnn import PixelQSpec

        stack, height, width = (int(x) for x in obs_space.shape)
        return PixelQSpec(
            stack,
            height,
            width,
            int(action_space.n),
            config.learner.pixel_torso,
            config.learner.dueling,
        )
    obs_dim = _flat_box(config, obs_space)
    return ModelSpec(
        obs_dim, int(action_space.n), config.learner.hidden_sizes, dueling=config.learner.dueling
    )


def _actor_critic(config, obs_space: gym.Space, action_space: gym.Space):
    from collector.networks.actor_critic import ActorCriticSpec

    if _pixels(obs_space):
        from collector.networks.cnn import PixelActorCriticSpec

        stack, height, width = (int(x) for x in obs_space.shape)
        return PixelActorCriticSpec(
            stack, height, width, int(action_space.n), config.learner.pixel_torso
        )
    obs_dim = _flat_box(config, obs_space)
    if isinstance(action_space, gym.spaces.Discrete):
        return ActorCriticSpec(
            obs_dim, int(action_space.n), "categorical", config.learner.hidden_sizes
        )
    return ActorCriticSpec(
        obs_dim, int(action_space.shape[0]), "gaussian", config.learner.hidden_sizes
    )


def _squashed_actor(config, obs_space: gym.Space, action_space: gym.Space):
    from collector.networks.squashed import SquashedGaussianSpec

    obs_dim = _flat_box(config, obs_space)
    return SquashedGaussianSpec(
        obs_dim,
        int(action_space.shape[0]),
        tuple(float(x) for x in action_space.low),
        tuple(float(x) for x in action_space.high),
        config.learner.hidden_sizes,
    )


_ON_POLICY = {
    "collector": {"n_step": 1},
    "replay": {"sampler": "fifo", "capacity": 100_000, "num_shards": 1},
    "controller": {"init_random_frames": 0},
}


def _merged(base: Mapping, extra: Mapping) -> dict:
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in base.items()}
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


ALGORITHMS: dict[str, Algorithm] = {
    "dqn": Algorithm("dqn", "offpolicy", "dqn", "discrete", {}, _q_network, epsilon_greedy=True),
    "ppo": Algorithm(
        "ppo",
        "onpolicy",
        "ppo",
        "any",
        _merged(
            _ON_POLICY,
            {
                "collector": {"rollout_frames": 1024, "gae_lambda": 0.95},
                "learner": {
                    "loss": "ppo",
                    "hidden_sizes": [64, 64],
                    "lr": 2.5e-4,
                    "max_grad_norm": 0.5,
                    "onpolicy": {"num_epochs": 4, "num_minibatches": 4},
                },
            },
        ),
        _actor_critic,
        "gae",
    ),
    "a2c": Algorithm(
        "a2c",
        "onpolicy",
        "a2c",
        "any",
        _merged(
            _ON_POLICY,
            {
                "collector": {"rollout_frames": 40, "gae_lambda": 1.0},
                "learner": {
                    "loss": "a2c",
                    "hidden_sizes": [64, 64],
                    "lr": 7e-4,
                    "max_grad_norm": 0.5,
                    "onpolicy": {
                        "num_epochs": 1,
                        "num_minibatches": 1,
                        "ent_coef": 0.01,
                        "normalize_advantage": False,
                    },
                },
            },
        ),
        _actor_critic,
        "gae",
    ),
    "reinforce": Algorithm(
        "reinforce",
        "onpolicy",
        "reinforce",
        "any",
        _merged(
            _ON_POLICY,
            {
                "learner": {
                    "loss": "reinforce",
                    "hidden_sizes": [64, 64],
                    "lr": 1e-3,
                    "onpolicy": {"num_epochs": 1, "num_minibatches": 1},
                },
            },
        ),
        _actor_critic,
        "episodes",
    ),
    "sac": Algorithm(
        "sac",
        "offpolicy",
        "sac",
        "continuous",
        {
            "collector": {"env_id": "Pendulum-v1", "n_step": 1},
            "replay": {"capacity": 200_000},
            "learner": {
                "loss": "sac",
                "hidden_sizes": [256, 256],
                "lr": 1e-3,
                "global_batch_size": 128,
                "target_update_tau": 0.005,
                "grad_clip": "none",
            },
            "controller": {"init_random_frames": 2000, "utd_ratio": 1.0},
        },
        _squashed_actor,
    ),
}
for _name, _mixer in multiagent.MIXER_OF.items():
    ALGORITHMS[_name] = Algorithm(
        _name,
        "offpolicy",
        "marl",
        "agents",
        _merged(multiagent.DEFAULTS, {"learner": {"marl": {"mixer": _mixer}}}),
        multiagent.agent_q_spec,
        epsilon_greedy=True,
        multi_agent=True,
    )


def algorithm_for(config) -> Algorithm:
    """The recipe of ``config.algorithm``."""
    return ALGORITHMS[config.algorithm]


def with_defaults(data: Mapping) -> dict:
    """``data`` (a raw config mapping) completed with its algorithm's defaults.

    Raises:
        AlgorithmConfigError: If ``algorithm`` names no recipe.
    """
    name = data.get("algorithm", "dqn")
    if name not in ALGORITHMS:
        raise AlgorithmConfigError(f"algorithm: must be one of {tuple(ALGORITHMS)}, got {name!r}")
    return _merged(ALGORITHMS[name].defaults, data)


def check(config) -> None:
    """Refuses combinations the algorithm cannot run (spaces are checked by :func:`spec_for`).

    Raises:
        AlgorithmConfigError: Naming the field.
    """
    algo = ALGORITHMS[config.algorithm]
    learner, collector = config.learner, config.collector
    if ":" not in learner.loss and learner.loss != algo.loss:
        raise AlgorithmConfigError(
            f"learner.loss: algorithm {algo.name} trains with {algo.loss!r} (or a "
            f"'module:factory' loss), got {learner.loss!r}"
        )
    if learner.loss.startswith("torchrl:"):  # LearnerConfig has checked the torchrl extra
        from learner.losses.torchrl_loss import check_torchrl_options, torchrl_algorithm

        if torchrl_algorithm(learner.loss) != algo.name:
            raise AlgorithmConfigError(
                f"learner.loss: {learner.loss} trains algorithm "
                f"{torchrl_algorithm(learner.loss)}, the run's algorithm is {algo.name}"
            )
        try:
            check_torchrl_options(learner.loss, learner.loss_options)
        except ValueError as err:
            raise AlgorithmConfigError(str(err)) from None
    if not algo.on_policy:
        if config.replay.sampler == "fifo":
            raise AlgorithmConfigError(
                f"replay.sampler: {algo.name} is off-policy and needs uniform or prioritized "
                "(fifo is for on-policy algorithms), got 'fifo'"
            )
        if algo.multi_agent:
            try:
                multiagent.check(config)
            except multiagent.MultiAgentConfigError as err:
                raise AlgorithmConfigError(str(err)) from None
        return
    options = learner.onpolicy
    if config.replay.sampler != "fifo":
        raise AlgorithmConfigError(
            f"replay.sampler: {algo.name} is on-policy and needs 'fifo', got "
            f"{config.replay.sampler!r}"
        )
    if config.controller.init_random_frames:
        raise AlgorithmConfigError(
            f"controller.init_random_frames: {algo.name} learns from its own samples only; "
            f"must be 0, got {config.controller.init_random_frames}"
        )
    if algo.name == "a2c" and (options.num_epochs, options.num_minibatches) != (1, 1):
        raise AlgorithmConfigError(
            "learner.onpolicy.num_epochs: A2C takes one gradient step per batch; num_epochs and "
            f"num_minibatches must be 1, got {options.num_epochs} and {options.num_minibatches}"
        )
    if algo.transform == "episodes":
        return  # the batch is whatever complete episodes make
    batch = collector.num_collectors * collector.rollout_frames
    if batch % options.num_minibatches:
        raise AlgorithmConfigError(
            f"learner.onpolicy.num_minibatches: must divide the batch of {batch} transitions "
            f"(collector.num_collectors x collector.rollout_frames), got {options.num_minibatches}"
        )
    minibatch = batch // options.num_minibatches
    if minibatch % learner.world_size:
        raise AlgorithmConfigError(
            f"learner.world_size: each minibatch of {minibatch} is split across the ranks; "
            f"must divide it, got {learner.world_size}"
        )
    per_shard = -(-collector.num_collectors // config.replay.num_shards) * collector.rollout_frames
    if per_shard > config.replay.shard_capacity:
        raise AlgorithmConfigError(
            f"replay.capacity: each shard must hold one iteration's {per_shard} transitions, "
            f"got {config.replay.shard_capacity} per shard"
        )


def spec_for(config, obs_space: gym.Space, action_space: gym.Space):
    """The model spec of the run's algorithm for the env's spaces (imports torch).

    Raises:
        AlgorithmConfigError: If the action or observation space does not suit the algorithm.
    """
    check_spaces(config, obs_space, action_space)
    return ALGORITHMS[config.algorithm].build_spec(config, obs_space, action_space)


def check_spaces(config, obs_space: gym.Space, action_space: gym.Space) -> None:
    """Refuses env spaces the algorithm cannot use (no torch needed).

    Raises:
        AlgorithmConfigError: Naming ``collector.env_id``.
    """
    algo = ALGORITHMS[config.algorithm]
    if algo.multi_agent:
        try:
            return multiagent.check_spaces(config, obs_space, action_space)
        except multiagent.MultiAgentConfigError as err:
            raise AlgorithmConfigError(str(err)) from None
    discrete = isinstance(action_space, gym.spaces.Discrete)
    box = isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1
    if (algo.actions == "discrete" and not discrete) or (algo.actions == "continuous" and not box):
        kind = "a discrete" if algo.actions == "discrete" else "a continuous (Box)"
        raise AlgorithmConfigError(
            f"collector.env_id: {algo.name} needs {kind} action space, "
            f"{config.collector.env_id} has {action_space}"
        )
    if not (discrete or box):
        raise AlgorithmConfigError(
            f"collector.env_id: {algo.name} needs a Discrete or flat Box action space, "
            f"{config.collector.env_id} has {action_space}"
        )
    if algo.name in PIXEL_ALGORITHMS and _pixels(obs_space) and not discrete:
        raise AlgorithmConfigError(
            f"collector.env_id: {algo.name} on pixels needs a discrete action space, "
            f"{config.collector.env_id} has {action_space}"
        )
    if algo.name in ("ppo", "a2c") and _pixels(obs_space) and not config.replay.frame_stack:
        return  # a categorical actor-critic with a CNN torso (collector.networks.cnn)
    if algo.name == "dqn" and _pixels(obs_space):
        if config.replay.frame_stack not in (0, obs_space.shape[0]):
            raise AlgorithmConfigError(
                f"replay.frame_stack: must be 0 or the env's frame stack "
                f"{obs_space.shape[0]}, got {config.replay.frame_stack}"
            )
        if config.replay.frame_stack and config.grpc.enabled:
            raise AlgorithmConfigError(
                "grpc.port: external actors insert stacked observations, which a "
                "frame-deduplicated replay (replay.frame_stack) does not take; set "
                f"replay.frame_stack=0 to serve them, got port {config.grpc.port}"
            )
        return  # the Q-network is a CNN over the frames (collector.networks.cnn)
    if config.replay.frame_stack:
        raise AlgorithmConfigError(
            f"replay.frame_stack: needs stacked uint8 frames [S, H, W] and algorithm dqn "
            "(on-policy tables keep stacks), "
            f"{config.collector.env_id} has {obs_space}; got {config.replay.frame_stack}"
        )
    _flat_box(config, obs_space)
