"""relayrl's own memory tasks: envs whose state is not in the observation (``relayrl:<Name>``).

* ``relayrl:StatelessCartPole-v1``: CartPole-v1 with the velocities hidden: the observation is
  the cart position and the pole angle only (``[x, theta]``), 500 steps at most. A feed-forward
  policy sees no velocity and cannot balance for long; a recurrent one (``learner.recurrent``)
  infers it from successive observations (the task of POPGym's ``StatelessCartPole``, Morad et
  al., ICLR 2023, and of RLlib's ``StatelessCartPole`` example).

The ids are registered in gymnasium's ``relayrl`` namespace when this module is imported;
:func:`collector.envs.vector.gym_id` maps ``relayrl:Name-vN`` to ``relayrl/Name-vN`` (gymnasium
itself would read ``relayrl:`` as a module to import).

Examples:
    >>> import gymnasium as gym
    >>> env = gym.make("relayrl/StatelessCartPole-v1")
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, env.spec.max_episode_steps
    ((2,), 500)
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

NAMESPACE = "relayrl"
VISIBLE = (0, 2)  # CartPole's observation: x, x_dot, theta, theta_dot


class StatelessCartPole(gym.ObservationWrapper):
    """CartPole with only the cart position and the pole angle observed."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(
            box.low[list(VISIBLE)], box.high[list(VISIBLE)], dtype=np.float32
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """The visible entries of CartPole's observation."""
        return np.asarray(observation, np.float32)[list(VISIBLE)]


def stateless_cartpole(**kwargs) -> gym.Env:
    """The entry point of ``relayrl/StatelessCartPole-v1``."""
    return StatelessCartPole(CartPoleEnv(**kwargs))


def register() -> None:
    """Registers relayrl's envs in gymnasium (idempotent)."""
    if f"{NAMESPACE}/StatelessCartPole-v1" not in gym.registry:
        gym.register(
            f"{NAMESPACE}/StatelessCartPole-v1",
            entry_point="collector.envs.memory:stateless_cartpole",
            max_episode_steps=500,
            reward_threshold=475.0,
        )


register()
