"""A small cooperative PettingZoo parallel env with per-agent action masks (tests; a factory path).

:func:`parallel_env` returns :class:`MaskedAgents`: ``n_agents`` agents, ``num_actions`` actions
each, episodes of ``length`` steps (a termination). At every step each agent's allowed actions
are drawn afresh (at least one allowed, from the reset seed), and every agent pays the team 1
for taking its highest allowed action, 0 for another allowed one, and -1 for a forbidden one
(counted in :attr:`MaskedAgents.illegal`, so a test can ask the env itself).

The mask is where PettingZoo puts it: ``mask_in="observation"`` (default) gives each agent a
``Dict`` ``{"observation": f32[num_actions + 1], "action_mask": int8[num_actions]}`` (the
classic games' convention), ``mask_in="info"`` a ``Box`` observation and the mask in the agent's
info under ``action_mask``. The observation is the mask as floats and the episode's progress, so
the best action can be learned. ``mask_size`` (default ``num_actions``) gives a mask entry of
another size, which a run refuses.

Examples:
    >>> env = parallel_env()
    >>> obs, infos = env.reset(seed=0)
    >>> sorted(obs["a_0"]), obs["a_0"]["observation"].shape
    (['action_mask', 'observation'], (5,))
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv

KEY = "action_mask"


class MaskedAgents(ParallelEnv):
    """Agents whose allowed actions change every step (see the module docstring).

    Keyword Args:
        n_agents: Agents.
        num_actions: Actions per agent.
        length: Steps per episode.
        mask_in: ``observation`` or ``info``.
        mask_size: Size of the mask entry (tests of refusals).

    Attributes:
        illegal: Forbidden actions taken since the env was made.
    """

    metadata = {"name": "masked_agents_v0"}

    def __init__(
        self,
        *,
        n_agents: int = 2,
        num_actions: int = 4,
        length: int = 6,
        mask_in: str = "observation",
        mask_size: int | None = None,
    ) -> None:
        self.possible_agents = [f"a_{i}" for i in range(n_agents)]
        self.agents: list[str] = []
        self.num_actions = num_actions
        self.length = length
        self.mask_in = mask_in
        box = gym.spaces.Box(0.0, 1.0, (num_actions + 1,), np.float32)
        mask = gym.spaces.Box(0, 1, (mask_size or num_actions,), np.int8)
        self._obs_space = gym.spaces.Dict({"observation": box, KEY: mask})
        if mask_in == "info":
            self._obs_space = box
        self._action_space = gym.spaces.Discrete(num_actions)
        self.rng = np.random.default_rng(0)
        self.masks = np.ones((n_agents, num_actions), bool)
        self.t = 0
        self.illegal = 0

    def observation_space(self, agent):
        """Every agent's observation space."""
        return self._obs_space

    def action_space(self, agent):
        """Every agent's ``Discrete(num_actions)``."""
        return self._action_space

    def _draw(self):
        masks = self.rng.random(self.masks.shape) < 0.5
        none = ~masks.any(-1)
        masks[none, self.rng.integers(0, self.num_actions, size=int(none.sum()))] = True
        self.masks = masks
        progress = np.float32(self.t / self.length)
        obs, infos = {}, {}
        for i, agent in enumerate(self.agents):
            seen = np.append(masks[i].astype(np.float32), progress)
            if self.mask_in == "info":
                obs[agent], infos[agent] = seen, {KEY: masks[i].astype(np.int8)}
            else:
                obs[agent], infos[agent] = {"observation": seen, KEY: masks[i].astype(np.int8)}, {}
        return obs, infos

    def reset(self, seed=None, options=None):
        """A new episode; ``seed`` reseeds the masks."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        return self._draw()

    def step(self, actions):
        """Pays each agent for its action under the current masks, then draws new ones."""
        rewards = {}
        for i, agent in enumerate(self.agents):
            action = int(actions[agent])
            allowed = self.masks[i]
            if not allowed[action]:
                self.illegal += 1
                rewards[agent] = -1.0
            else:
                rewards[agent] = float(action == np.flatnonzero(allowed)[-1])
        self.t += 1
        done = self.t >= self.length
        terms = {a: done for a in self.agents}
        truncs = {a: False for a in self.agents}
        obs, infos = self._draw()
        if done:
            self.agents = []
        return obs, rewards, terms, truncs, infos


def parallel_env(**kwargs) -> MaskedAgents:
    """The factory a config names: ``collector.env_id: tests.masked_agents:parallel_env``."""
    return MaskedAgents(**kwargs)
