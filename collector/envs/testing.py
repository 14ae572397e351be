"""Small shipped envs with structured observations (tests, ``services.bench spaces``, examples).

    * :class:`CameraEnv`: ``Dict(image=Box(uint8, [size, size, 3]), state=Box(float32, [4]))``,
      a camera frame next to a state vector (what ``services.bench spaces`` collects); with
      ``flat=True`` the same env flattened to one float32 ``Box`` (gymnasium's
      ``flatten_space``), the baseline it is compared with.
    * :class:`CorridorEnv`: a corridor whose observation is
      ``Dict(agent=Discrete(n), goal=Discrete(n), noise=Box(float32, [2]))``; the agent walks
      (left, stay, right) to the goal and is paid ``1 - 0.9 * steps / max_steps`` there
      (MiniGrid's reward), so a random walk earns little and a learned policy about 0.9.
    * :class:`AllSpacesEnv`: one of each observation space relayrl takes, nested
      (``Dict``/``Tuple``, ``Box`` of rank 0-3, ``Discrete``, ``MultiDiscrete``,
      ``MultiBinary``), for round-trip tests.

Each is a ``module:function`` factory too (``collector.envs.testing:camera``, ...), so configs
name them as their ``collector.env_id``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class CameraEnv(gym.Env):
    """A camera frame and a state vector; two actions, paid for matching the state's sign.

    Args:
        size: The frame's side in pixels.
        episode_steps: Steps per episode.
        flat: Observe everything as one float32 ``Box`` instead of the ``Dict``.
    """

    def __init__(self, size: int = 48, episode_steps: int = 100, flat: bool = False) -> None:
        self.size = size
        self.episode_steps = episode_steps
        self.flat = flat
        self.structured = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (size, size, 3), np.uint8),
                "state": gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
            }
        )
        self.observation_space = (
            gym.spaces.flatten_space(self.structured) if flat else self.structured
        )
        self.action_space = gym.spaces.Discrete(2)
        self._frame = np.zeros((size, size, 3), np.uint8)
        self._state = np.zeros(4, np.float32)
        self._t = 0

    def _observe(self) -> Any:
        self._frame[...] = self.np_random.integers(0, 256, dtype=np.uint8)
        self._frame[: self.size // 2, :, 0] = 255 if self._state[0] > 0 else 0
        obs = {"image": self._frame.copy(), "state": self._state.copy()}
        return gym.spaces.flatten(self.structured, obs).astype(np.float32) if self.flat else obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Starts an episode."""
        super().reset(seed=seed)
        self._t = 0
        self._state = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return self._observe(), {}

    def step(self, action):
        """Pays 1 when ``action`` matches the sign of the state's first entry."""
        reward = float(int(action) == int(self._state[0] > 0))
        self._t += 1
        self._state = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return self._observe(), reward, False, self._t >= self.episode_steps, {}


class CorridorEnv(gym.Env):
    """Walk to the goal of a corridor; both positions observed as ``Discrete`` keys.

    Args:
        length: Cells of the corridor.
        max_steps: Steps before the episode is truncated.
    """

    def __init__(self, length: int = 7, max_steps: int = 20) -> None:
        self.length = length
        self.max_steps = max_steps
        self.observation_space = gym.spaces.Dict(
            {
                "agent": gym.spaces.Discrete(length),
                "goal": gym.spaces.Discrete(length),
                "noise": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            }
        )
        self.action_space = gym.spaces.Discrete(3)
        self._agent = self._goal = self._t = 0

    def _observe(self) -> dict[str, Any]:
        noise = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return {"agent": self._agent, "goal": self._goal, "noise": noise}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Places the agent and the goal in different cells."""
        super().reset(seed=seed)
        self._agent, self._goal = (int(x) for x in self.np_random.choice(self.length, 2, False))
        self._t = 0
        return self._observe(), {}

    def step(self, action):
        """Moves left (0), stays (1) or moves right (2)."""
        self._agent = int(np.clip(self._agent + int(action) - 1, 0, self.length - 1))
        self._t += 1
        reached = self._agent == self._goal
        reward = 1.0 - 0.9 * self._t / self.max_steps if reached else 0.0
        return self._observe(), reward, reached, self._t >= self.max_steps and not reached, {}


class AllSpacesEnv(gym.Env):
    """Every observation space relayrl takes, nested; two actions, reward 1 for action 1."""

    def __init__(self, episode_steps: int = 8) -> None:
        self.episode_steps = episode_steps
        self.observation_space = gym.spaces.Dict(
            {
                "camera": gym.spaces.Box(0, 255, (3, 36, 36), np.uint8),
                "grid": gym.spaces.Box(0, 10, (5, 5, 3), np.uint8),
                "scalar": gym.spaces.Box(-1.0, 1.0, (), np.float64),
                "matrix": gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32),
                "pose": gym.spaces.Tuple(
                    (gym.spaces.Discrete(4, start=1), gym.spaces.MultiDiscrete([2, 3]))
                ),
                "flags": gym.spaces.MultiBinary(5),
            }
        )
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Starts an episode."""
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self._t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        """Pays 1 for action 1."""
        self._t += 1
        done = self._t >= self.episode_steps
        return self.observation_space.sample(), float(action), False, done, {}


def camera(size: int = 48, episode_steps: int = 100, flat: bool = False) -> CameraEnv:
    """Factory of :class:`CameraEnv` (``collector.env_id: collector.envs.testing:camera``)."""
    return CameraEnv(size, episode_steps, flat)


def corridor(length: int = 7, max_steps: int = 20) -> CorridorEnv:
    """Factory of :class:`CorridorEnv`."""
    return CorridorEnv(length, max_steps)


def all_spaces(episode_steps: int = 8) -> AllSpacesEnv:
    """Factory of :class:`AllSpacesEnv`."""
    return AllSpacesEnv(episode_steps)
