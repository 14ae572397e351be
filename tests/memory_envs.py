"""A task only a policy with memory solves, learned in seconds (recurrent CI runs).

``tests.memory_envs:cue``: the first observation shows a cue (-1 or +1), the next ``delay``
observations are blank, and the last one asks for it; the action then (0 for -1, 1 for +1) is
rewarded +1 if it matches the cue and -1 otherwise, and the episode ends. Every other step
pays 0 whatever the action. A feed-forward policy cannot see the cue when asked: its expected
return is 0; a recurrent one can reach 1.
"""

import gymnasium as gym
import numpy as np


class CueEnv(gym.Env):
    """Remember the first observation's sign until the last step of the episode."""

    def __init__(self, delay: int = 3) -> None:
        self.delay = delay
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.cue, self.t = 1, 0

    def _obs(self) -> np.ndarray:
        if self.t == 0:
            return np.array([self.cue, 0.0], np.float32)
        return np.array([0.0, 1.0 if self.t > self.delay else 0.0], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.choice([-1, 1])), 0
        return self._obs(), {}

    def step(self, action):
        asked = self.t > self.delay
        self.t += 1
        if not asked:
            return self._obs(), 0.0, False, False, {}
        reward = 1.0 if (int(action) == 1) == (self.cue == 1) else -1.0
        return self._obs(), reward, True, False, {}


def cue(delay: int = 3) -> gym.Env:
    """The factory a config names: ``collector.env_id: tests.memory_envs:cue``."""
    return CueEnv(delay)
