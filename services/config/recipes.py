"""Algorithm recipes: an algorithm is data, the loop, loss, network and defaults it stands for.

An algorithm is three choices, not a branch in the controller (``docs/algorithms.md``):

* a **loop** (``services.driver.loops``): ``offpolicy`` (asynchronous collection into
  replay, learner rounds paced by the update-to-data ratio: DQN, SAC) or ``onpolicy``
  (lockstep iterations: collect one batch with the current version into FIFO tables, train
  epochs of minibatches on exactly that batch, publish: PPO, A2C, REINFORCE);
* a **loss** (``learner.losses.LOSSES``), named by ``learner.loss``;
* a **network** (``collector.networks.builders.NETWORKS``), whose spec makes the collector
  policy: epsilon-greedy over a Q-network (DQN), a categorical or Gaussian actor-critic (PPO,
  A2C, REINFORCE; from the env's action space), SAC's tanh-Gaussian actor, or per-agent
  epsilon-greedy over one parameter-shared agent network (IQL, VDN, QMIX on PettingZoo parallel
  envs: ``services.config.multiagent``); on-policy collectors also build advantages (GAE) or
  Monte-Carlo returns.

``algorithm: <name>`` in a config selects a recipe; the recipe's ``defaults`` fill every field
the config leaves unset (so ``--set algorithm=ppo`` alone is a working PPO run), and
``services.config.checks`` refuses, from the recipe's fields, combinations that cannot work
before any actor starts.

Examples:
    >>> recipe = ALGORITHMS["ppo"]
    >>> recipe.loop, recipe.loss, recipe.network, recipe.pixel_network
    ('onpolicy', 'ppo', 'actor_critic', 'cnn_actor_critic')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from collector.config import OnPolicyTransform
from collector.networks.builders import is_pixels
from services.config import multiagent


class AlgorithmConfigError(ValueError):
    """A combination the algorithm cannot run; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One algorithm's recipe.

    Attributes:
        name: The ``algorithm`` value.
        loop: ``offpolicy`` or ``onpolicy``.
        loss: The built-in ``learner.loss`` it trains with (a key of ``learner.losses.LOSSES``).
        network: The network over flat observations (a key of
            ``collector.networks.builders.NETWORKS``).
        actions: Action spaces it accepts: ``discrete``, ``continuous``, ``any`` or ``agents``
            (the multi-agent wrapper's).
        defaults: Config values (nested like the YAML) used where the config sets none.
        pixel_network: The network over stacked uint8 frames ``[S, H, W]`` (a key of
            ``NETWORKS``, discrete actions only); None: flat observations only. Off-policy
            ones may store frames once in replay (``replay.frame_stack``).
        transform: On-policy collectors' targets: ``gae`` or ``episodes`` (None: off-policy).
        epsilon_greedy: Collectors explore with the driver's annealed epsilon (Q-learning);
            otherwise the policy's own sampling is the exploration.
        multi_agent: Runs on PettingZoo parallel envs (``services.config.multiagent``): agent
            fields carry an agent dimension, and the env's spaces are the multi-agent wrapper's.
        one_step_per_batch: Takes exactly one gradient step per collected batch (A2C), so
            ``learner.onpolicy.num_epochs`` and ``num_minibatches`` must be 1.
    """

    name: str
    loop: str
    loss: str
    network: str
    actions: str
    defaults: Mapping[str, Any]
    pixel_network: str | None = None
    transform: str | None = None
    epsilon_greedy: bool = False
    multi_agent: bool = False
    one_step_per_batch: bool = False

    @property
    def on_policy(self) -> bool:
        """Whether it runs the lockstep on-policy loop."""
        return self.loop == "onpolicy"

    def network_for(self, obs_space: gym.Space) -> str:
        """The ``NETWORKS`` key of its network for observations in ``obs_space``."""
        if self.pixel_network is not None and is_pixels(obs_space):
            return self.pixel_network
        return self.network

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
    "dqn": Algorithm(
        "dqn",
        "offpolicy",
        "dqn",
        "q_mlp",
        "discrete",
        {},
        pixel_network="cnn_q",
        epsilon_greedy=True,
    ),
    "ppo": Algorithm(
        "ppo",
        "onpolicy",
        "ppo",
        "actor_critic",
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
        pixel_network="cnn_actor_critic",
        transform="gae",
    ),
    "a2c": Algorithm(
        "a2c",
        "onpolicy",
        "a2c",
        "actor_critic",
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
        pixel_network="cnn_actor_critic",
        transform="gae",
        one_step_per_batch=True,
    ),
    "reinforce": Algorithm(
        "reinforce",
        "onpolicy",
        "reinforce",
        "actor_critic",
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
        transform="episodes",
    ),
    "sac": Algorithm(
        "sac",
        "offpolicy",
        "sac",
        "squashed",
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
    ),
}
for _name, _mixer in multiagent.MIXER_OF.items():
    ALGORITHMS[_name] = Algorithm(
        _name,
        "offpolicy",
        "marl",
        "agents",
        "agents",
        _merged(multiagent.DEFAULTS, {"learner": {"marl": {"mixer": _mixer}}}),
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
