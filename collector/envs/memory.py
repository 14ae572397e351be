"""relayrl's own memory tasks: envs whose state is not in the observation (``relayrl:<Name>``).

* ``relayrl:StatelessCartPole-v1``: CartPole-v1 with the velocities hidden: the observation is
  the cart position and the pole angle only (``[x, theta]``), 500 steps at most. A feed-forward
  policy sees no velocity and cannot balance for long; a recurrent one (``learner.recurrent``)
  infers it from successive observations (the task of POPGym's ``StatelessCartPole``, Morad et
  al., ICLR 2023, and of RLlib's ``StatelessCartPole`` example).
* ``relayrl:StatelessPendulum-v1``: Pendulum-v1 with the angular velocity hidden: the
  observation is ``[cos theta, sin theta]``, 200 steps at most (POPGym's and Ni et al.'s
  velocity-masked Pendulum, "Recurrent Model-Free RL Can Be a Strong Baseline", ICML 2022).

The ids are registered in gymnasium's ``relayrl`` namespace when this module is imported;
:func:`collector.envs.vector.gym_id` maps ``relayrl:Name-vN`` to ``relayrl/Name-vN`` (gymnasium
itself would read ``relayrl:`` as a module to import).

Examples:
    >>> import gymnasium as gym
    >>> env = gym.make("relayrl/StatelessCartPole-v1")
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, env.spec.max_episode_steps
    ((2,), 500)
    >>> gym.make("relayrl/StatelessPendulum-v1").observation_space.shape
    (2,)
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.pendulum import PendulumEnv

NAMESPACE = "relayrl"
VISIBLE = (0, 2)  # CartPole's observation: x, x_dot, theta, theta_dot


class _Masked(gym.ObservationWrapper):
    """An env with only the entries ``VISIBLE`` of its flat ``Box`` observation observed."""

    VISIBLE: tuple[int, ...] = ()

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box, visible = env.observation_space, list(self.VISIBLE)
        self.observation_space = gym.spaces.Box(
            box.low[visible], box.high[visible], dtype=np.float32
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """The visible entries of the observation."""
        return np.asarray(observation, np.float32)[list(self.VISIBLE)]


class StatelessCartPole(_Masked):
    """CartPole with only the cart position and the pole angle observed."""

    VISIBLE = VISIBLE


class StatelessPendulum(_Masked):
    """Pendulum with only ``cos theta`` and ``sin theta`` observed (no angular velocity)."""

    VISIBLE = (0, 1)  # Pendulum's observation: cos theta, sin theta, theta_dot


def stateless_cartpole(**kwargs) -> gym.Env:
    """The entry point of ``relayrl/StatelessCartPole-v1``."""
    return StatelessCartPole(CartPoleEnv(**kwargs))


def stateless_pendulum(**kwargs) -> gym.Env:
    """The entry point of ``relayrl/StatelessPendulum-v1``."""
    return StatelessPendulum(PendulumEnv(**kwargs))


def register() -> None:
    """Registers relayrl's envs in gymnasium (idempotent)."""
    if f"{NAMESPACE}/StatelessCartPole-v1" not in gym.registry:
        gym.register(
            f"{NAMESPACE}/StatelessCartPole-v1",
            entry_point="collector.envs.memory:stateless_cartpole",
            max_episode_steps=500,
            reward_threshold=475.0,
        )
    if f"{NAMESPACE}/StatelessPendulum-v1" not in gym.registry:
        gym.register(
            f"{NAMESPACE}/StatelessPendulum-v1",
            entry_point="collector.envs.memory:stateless_pendulum",
            max_episode_steps=200,
        )


register()
