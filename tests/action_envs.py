"""Small envs with composite action spaces and action masks (tests; factory paths).

* :func:`multi_discrete`: ``MultiDiscrete([3, 2])``; reward 1 per dimension whose choice matches
  the state's target (a one-hot of the target per dimension), episodes of 8 steps.
* :func:`multi_binary`: ``MultiBinary(3)``; reward 1 per bit equal to the observation's bit.
* :func:`info_masked`: ``Discrete(4)`` whose mask comes in ``info["legal"]``: action 0 pays 1
  but is forbidden on every other step (the tempting action often masked), the others pay 0.2;
  a forbidden action pays -1. The observation says whether 0 is allowed.
* :func:`tuple_actions`: a ``Tuple`` action space no algorithm takes.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

LENGTH = 8


class _Targets(gym.Env):
    """An 8-step episode of random targets, one observation per step."""

    def __init__(self, action_space: gym.Space, width: int) -> None:
        self.action_space = action_space
        self.observation_space = gym.spaces.Box(0.0, 1.0, (width,), np.float32)
        self.width = width
        self.t = 0

    def _draw(self) -> np.ndarray:
        self.target = self.np_random.integers(0, 2, size=self.width).astype(np.float32)
        return self.target.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def _reward(self, action) -> float:
        raise NotImplementedError

    def step(self, action):
        reward = self._reward(np.asarray(action))
        self.t += 1
        return self._draw(), reward, False, self.t >= LENGTH, {}


class _MultiDiscrete(_Targets):
    def __init__(self) -> None:
        super().__init__(gym.spaces.MultiDiscrete([3, 2]), 2)

    def _reward(self, action) -> float:
        return float(action[0] == 2 * self.target[0]) + float(action[1] == self.target[1])


class _MultiBinary(_Targets):
    def __init__(self) -> None:
        super().__init__(gym.spaces.MultiBinary(3), 3)

    def _reward(self, action) -> float:
        return float((action == self.target).sum())


class _InfoMasked(gym.Env):
    def __init__(self) -> None:
        self.action_space = gym.spaces.Discrete(4)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.t = 0

    def _obs(self):
        legal = np.array([self.t % 2 == 0, True, True, True])
        return np.array([float(legal[0]), 1.0], np.float32), {"legal": legal.astype(np.int8)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(0, 2))
        return self._obs()

    def step(self, action):
        legal = self._obs()[1]["legal"]
        reward = -1.0 if not legal[int(action)] else 1.0 if int(action) == 0 else 0.2
        self.t += 1
        obs, info = self._obs()
        return obs, reward, False, self.t >= LENGTH, info


class _MaskedCorridor(gym.Wrapper):
    """The corridor's ``Dict`` observation plus an ``action_mask`` key: staying is forbidden."""

    def __init__(self) -> None:
        from collector.envs.testing import CorridorEnv

        super().__init__(CorridorEnv())
        spaces = dict(self.env.observation_space.spaces)
        spaces["action_mask"] = gym.spaces.Box(0, 1, (3,), np.int8)
        self.observation_space = gym.spaces.Dict(spaces)

    def _masked(self, obs):
        return {**obs, "action_mask": np.array([1, 0, 1], np.int8)}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._masked(obs), info

    def step(self, action):
        obs, *rest = self.env.step(action)
        return (self._masked(obs), *rest)


def masked_corridor() -> gym.Env:
    """See the module docstring."""
    return _MaskedCorridor()


def multi_discrete() -> gym.Env:
    """See the module docstring."""
    return _MultiDiscrete()


def multi_binary() -> gym.Env:
    """See the module docstring."""
    return _MultiBinary()


def info_masked() -> gym.Env:
    """See the module docstring."""
    return _InfoMasked()


def tuple_actions() -> gym.Env:
    """See the module docstring."""
    env = _MultiBinary()
    env.action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))
    return env
