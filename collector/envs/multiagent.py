"""Cooperative multi-agent envs (PettingZoo's parallel API) as one vector env (no Ray).

:class:`ParallelVectorEnv` steps ``num_envs`` PettingZoo parallel envs and looks to the rollout
worker like a gymnasium vector env in ``NEXT_STEP`` autoreset mode, with these shapes:

* observation: ``{"observation": f32[num_envs, n_agents, obs_dim], "state": f32[num_envs,
  state_dim]}`` (``state`` omitted with ``global_state: none``). With ``prev_action`` each
  agent's observation ends with the one-hot of its previous action (zeros after a reset), so
  stored ``observation`` and ``next_observation`` carry it through n-step windows unchanged.
* action: ``int64[num_envs, n_agents]`` (the single action space is a ``MultiDiscrete``).
* reward: the team reward ``f32[num_envs]``, the sum of the agents' rewards; the per-agent
  rewards are in ``info["agent_reward"]`` ``[num_envs, n_agents]``.
* terminated / truncated: ``bool[num_envs]`` for the team. The episode ends when every agent is
  done; it is a termination if no agent was truncated at that step (a learner then does not
  bootstrap), otherwise a truncation. An agent that is done before the others gets zero
  observations and its actions are not sent to the env.

With ``action_mask_key`` (``collector.action_mask_key``) each agent's action mask is read where
PettingZoo puts it: in the agent's observation, a ``Dict`` holding ``observation`` and the mask
key (the mask is taken out and the remaining entry is the agent's observation), or else in the
agent's info under that key. The wrapper reports the masks in ``info[action_mask_key]``
``bool[num_envs, n_agents, n_actions]`` (its :attr:`ParallelVectorEnv.mask_shape`; all True for
an agent that is done or reports none), where the workers read them (``collector.envs.masks``).

The global state is the env's ``state()`` (``global_state: env``), the agents' observations
concatenated (``observations``), either (``auto``: ``state()`` when the env implements it), or
none. Agents are ordered as ``possible_agents``; parameter sharing needs them all to have the
same observation shape and the same ``Discrete`` action space.

Usage sketch::

    envs = ParallelVectorEnv.from_factory("mpe2.simple_spread_v3:parallel_env", 4,
                                          env_kwargs={"N": 3, "continuous_actions": False})
    obs, _ = envs.reset(seed=[1, 2, 3, 4])
    obs, team_reward, terminated, truncated, info = envs.step(np.zeros((4, 3), np.int64))
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from collector.config import GLOBAL_STATES
from collector.envs.masks import strip_mask_space
from collector.envs.vector import is_factory_path, resolve_factory

EXTRA = 'pip install "relayrl[marl]"'


def has_pettingzoo() -> bool:
    """Whether the ``marl`` extra's ``pettingzoo`` package is installed."""
    return importlib.util.find_spec("pettingzoo") is not None


@dataclasses.dataclass(frozen=True)
class AgentLayout:
    """The agents of a parallel env as parameter sharing sees them.

    Attributes:
        agents: Agent names in ``possible_agents`` order (the agent index of every array).
        obs_dim: Size of one agent's flat observation (before the previous-action one-hot).
        num_actions: Size of every agent's ``Discrete`` action space.
        state_dim: Size of the global state (0: no state).
        state_source: ``env`` (the env's ``state()``), ``observations`` or ``none``.
        mask_key: Where each agent's action mask is (``collector.action_mask_key``); empty:
            no masks.
        mask_in_obs: Whether the mask is an entry of the agents' ``Dict`` observations (else
            the agents' infos carry it).
    """

    agents: tuple[str, ...]
    obs_dim: int
    num_actions: int
    state_dim: int
    state_source: str
    mask_key: str = ""
    mask_in_obs: bool = False

    @property
    def n_agents(self) -> int:
        """Number of agents."""
        return len(self.agents)


def make_parallel_env(env_id: str, env_kwargs: Mapping[str, Any] | None = None):
    """Builds one PettingZoo parallel env from a ``module:function`` factory.

    Raises:
        ValueError: Naming ``env_id`` if it is not a factory path, cannot be imported, or does
            not return a PettingZoo ``ParallelEnv``.
    """
    if not has_pettingzoo():
        raise ValueError(f"env_id: multi-agent envs need pettingzoo; {EXTRA}")
    from pettingzoo.utils.env import ParallelEnv

    if not is_factory_path(env_id):
        raise ValueError(
            "env_id: multi-agent algorithms need a 'module:function' factory returning a "
            f"PettingZoo parallel env (e.g. 'mpe2.simple_spread_v3:parallel_env'), got {env_id!r}"
        )
    env = resolve_factory(env_id)(**dict(env_kwargs or {}))
    if not isinstance(env, ParallelEnv):
        raise ValueError(
            f"env_id: {env_id!r} returned {type(env).__name__}, not a PettingZoo ParallelEnv "
            "(use the env's parallel_env(), or pettingzoo.utils.aec_to_parallel)"
        )
    return env


def agent_layout(env, global_state: str = "auto", mask_key: str | None = None) -> AgentLayout:
    """Checks that ``env``'s agents can share one network and reads their sizes.

    Args:
        env: A PettingZoo parallel env (not reset yet is fine).
        global_state: ``auto``, ``env``, ``observations`` or ``none``.
        mask_key: ``collector.action_mask_key``: an entry of the agents' ``Dict``
            observations (taken out of them) or of their infos.

    Raises:
        ValueError: Naming ``env_id`` (agents that differ, non-discrete actions, non-flat
            observations), ``global_state`` (``env`` for an env without ``state()``) or
            ``action_mask_key`` (a mask entry whose size is not the action count).
    """
    if global_state not in GLOBAL_STATES:
        raise ValueError(f"global_state: must be one of {GLOBAL_STATES}, got {global_state!r}")
    agents = tuple(env.possible_agents)
    if not agents:
        raise ValueError("env_id: the env has no agents")
    obs_spaces = [env.observation_space(a) for a in agents]
    action_spaces = [env.action_space(a) for a in agents]
    first = action_spaces[0]
    if not all(isinstance(s, gym.spaces.Discrete) for s in action_spaces):
        raise ValueError(
            f"env_id: parameter-shared Q-learning needs Discrete action spaces, got {first}"
        )
    if any(s.n != first.n or s.start != first.start for s in action_spaces):
        found = {a: int(s.n) for a, s in zip(agents, action_spaces, strict=True)}
        raise ValueError(
            f"env_id: agents share one Q-network, so they need the same action space; got {found}"
        )
    mask_in_obs = bool(mask_key) and all(_holds(s, mask_key) for s in obs_spaces)
    if mask_in_obs:
        obs_spaces = [_strip_mask(s, mask_key, int(first.n)) for s in obs_spaces]
    shapes = {s.shape for s in obs_spaces}
    if len(shapes) != 1 or obs_spaces[0].shape is None or len(obs_spaces[0].shape) != 1:
        hint = (
            "; an observation Dict holding an action mask needs collector.action_mask_key"
            if any(isinstance(s, gym.spaces.Dict) for s in obs_spaces) and not mask_in_obs
            else ""
        )
        raise ValueError(
            "env_id: agents share one Q-network, so they need the same flat Box observation; "
            f"got {[str(s) for s in obs_spaces]}{hint}"
        )
    obs_dim = int(obs_spaces[0].shape[0])
    state_space = _env_state_space(env)
    source = global_state
    if global_state == "auto":
        source = "env" if state_space is not None else "observations"
    if source == "env" and state_space is None:
        raise ValueError(
            "global_state: 'env' needs an env with state() and state_space; "
            "use 'observations' (the agents' observations concatenated) or 'auto'"
        )
    state_dim = {
        "env": int(np.prod(state_space.shape)) if state_space is not None else 0,
        "observations": obs_dim * len(agents),
        "none": 0,
    }[source]
    return AgentLayout(
        agents, obs_dim, int(first.n), state_dim, source, mask_key or "", mask_in_obs
    )


def _holds(space: gym.Space, key: str) -> bool:
    return isinstance(space, gym.spaces.Dict) and key in space.spaces


def _strip_mask(space: gym.Space, key: str, num_actions: int) -> gym.Space:
    """An agent's observation space without its mask entry (PettingZoo's ``observation``)."""
    mask = space[key]
    size = int(np.prod(mask.shape)) if mask.shape is not None else -1
    if size != num_actions:
        raise ValueError(
            f"action_mask_key: {key!r}: each agent's mask {mask} must have one entry per "
            f"action ({num_actions})"
        )
    return strip_mask_space(space, key)


def _env_state_space(env) -> gym.Space | None:
    try:
        space = env.state_space
    except (AttributeError, NotImplementedError):
        return None
    return space if isinstance(space, gym.spaces.Box) else None


def vector_spaces(layout: AgentLayout, prev_action: bool = False) -> tuple[gym.Space, gym.Space]:
    """The single observation (``Dict``) and action (``MultiDiscrete``) spaces of the wrapper."""
    width = layout.obs_dim + (layout.num_actions if prev_action else 0)
    entries = {"observation": gym.spaces.Box(-np.inf, np.inf, (layout.n_agents, width), np.float32)}
    if layout.state_dim:
        entries["state"] = gym.spaces.Box(-np.inf, np.inf, (layout.state_dim,), np.float32)
    actions = gym.spaces.MultiDiscrete([layout.num_actions] * layout.n_agents)
    return gym.spaces.Dict(entries), actions


class ParallelVectorEnv(gym.vector.VectorEnv):
    """PettingZoo parallel envs stepped together, agent fields stacked (see module docstring).

    Args:
        env_fns: One callable per sub-env returning a PettingZoo parallel env.

    Keyword Args:
        global_state: ``auto``, ``env``, ``observations`` or ``none``.
        prev_action: Append the one-hot of each agent's previous action to its observation.
        action_mask_key: Read each agent's action mask there (see the module docstring).

    Attributes:
        mask_shape: ``(n_agents, n_actions)``: one env's masks in ``info[action_mask_key]``.

    Raises:
        ValueError: If the envs' agents cannot share a network (see :func:`agent_layout`).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        *,
        global_state: str = "auto",
        prev_action: bool = False,
        action_mask_key: str | None = None,
    ) -> None:
        self.envs = [fn() for fn in env_fns]
        self.num_envs = len(self.envs)
        self.layout = agent_layout(self.envs[0], global_state, action_mask_key)
        self.mask_shape = (self.layout.n_agents, self.layout.num_actions)
        self.prev_action = prev_action
        self.single_observation_space, self.single_action_space = vector_spaces(
            self.layout, prev_action
        )
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
        n, k = self.num_envs, self.layout.n_agents
        self._last_action = np.zeros((n, k), dtype=np.int64)
        self._fresh = np.ones(n, dtype=bool)  # no action taken since the last reset
        self._needs_reset = np.zeros(n, dtype=bool)
        self._masks = np.ones((n, *self.mask_shape), dtype=bool)

    @classmethod
    def from_factory(
        cls,
        env_id: str,
        num_envs: int,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        global_state: str = "auto",
        prev_action: bool = False,
        action_mask_key: str | None = None,
    ) -> ParallelVectorEnv:
        """``num_envs`` envs from a ``module:function`` factory (see :func:`make_parallel_env`)."""
        make_parallel_env(env_id, env_kwargs).close()  # checks the factory once, up front
        kwargs = dict(env_kwargs or {})
        fns = [lambda: make_parallel_env(env_id, kwargs)] * num_envs
        return cls(
            fns,
            global_state=global_state,
            prev_action=prev_action,
            action_mask_key=action_mask_key,
        )

    @property
    def n_agents(self) -> int:
        """Number of agents per env."""
        return self.layout.n_agents

    def reset(self, *, seed: int | Sequence[int] | None = None, options=None):
        """Resets every env (``seed``: one per env, or a base seed) and returns observations."""
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
        obs = self._empty_obs()
        for i, env in enumerate(self.envs):
            agent_obs, agent_info = env.reset(seed=seeds[i], options=options)
            self._write_obs(obs, i, env, agent_obs, agent_info)
        self._last_action[:] = 0
        self._fresh[:] = True
        self._needs_reset[:] = False
        return self._with_prev_action(obs), self._info({})

    def step(self, actions):
        """Steps every env with ``actions`` ``[num_envs, n_agents]`` (auto-resetting ended ones).

        Returns:
            ``(observation, team_reward, terminated, truncated, info)``; ``info`` holds
            ``agent_reward`` ``[num_envs, n_agents]`` (and with ``action_mask_key`` the masks
            of the returned observations).
        """
        actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs, self.n_agents)
        obs = self._empty_obs()
        n, agents = self.num_envs, self.layout.agents
        agent_reward = np.zeros((n, len(agents)), dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        for i, env in enumerate(self.envs):
            if self._needs_reset[i]:
                agent_obs, agent_info = env.reset()
                self._write_obs(obs, i, env, agent_obs, agent_info)
                self._needs_reset[i] = False
                self._fresh[i] = True
                continue
            live = env.agents
            step_actions = {a: int(actions[i, j]) for j, a in enumerate(agents) if a in live}
            agent_obs, rewards, terms, truncs, agent_info = env.step(step_actions)
            for j, a in enumerate(agents):
                agent_reward[i, j] = rewards.get(a, 0.0)
            self._write_obs(obs, i, env, agent_obs, agent_info)
            done = not env.agents or all(
                terms.get(a, True) or truncs.get(a, True) for a in step_actions
            )
            if done:
                truncated[i] = any(truncs.get(a, False) for a in step_actions)
                terminated[i] = not truncated[i]
                self._needs_reset[i] = True
            self._last_action[i] = actions[i]
            self._fresh[i] = False
        team_reward = agent_reward.sum(axis=1)
        info = self._info({"agent_reward": agent_reward})
        return self._with_prev_action(obs), team_reward, terminated, truncated, info

    def close_extras(self, **kwargs) -> None:
        """Closes the sub-envs."""
        for env in self.envs:
            env.close()

    # -- observation assembly ------------------------------------------------------------------
    def _empty_obs(self) -> dict[str, np.ndarray]:
        layout = self.layout
        obs = {
            "observation": np.zeros((self.num_envs, layout.n_agents, layout.obs_dim), np.float32)
        }
        if layout.state_dim:
            obs["state"] = np.zeros((self.num_envs, layout.state_dim), np.float32)
        return obs

    def _info(self, info: dict) -> dict:
        if self.layout.mask_key:
            info[self.layout.mask_key] = self._masks.copy()
        return info

    def _write_obs(
        self, obs: dict[str, np.ndarray], i: int, env, agent_obs: Mapping, agent_info: Mapping
    ) -> None:
        key, in_obs = self.layout.mask_key, self.layout.mask_in_obs
        if key:
            self._masks[i] = True  # agents that are done (or report no mask): anything
        for j, agent in enumerate(self.layout.agents):
            if agent not in agent_obs:
                continue
            seen = agent_obs[agent]
            mask = (agent_info or {}).get(agent, {}).get(key) if key and not in_obs else None
            if in_obs:  # the mask, and the one entry left besides it (agent_layout)
                mask, seen = seen[key], next(v for k, v in seen.items() if k != key)
            obs["observation"][i, j] = seen
            if mask is not None:
                row = np.asarray(mask, dtype=bool).reshape(-1)
                self._masks[i, j] = row if row.any() else True  # none allowed: any
        source = self.layout.state_source
        if source == "env":
            obs["state"][i] = np.asarray(env.state(), dtype=np.float32).reshape(-1)
        elif source == "observations":
            obs["state"][i] = obs["observation"][i].reshape(-1)

    def _with_prev_action(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self.prev_action:
            return obs
        one_hot = np.eye(self.layout.num_actions, dtype=np.float32)[self._last_action]
        one_hot[self._fresh] = 0.0
        obs["observation"] = np.concatenate([obs["observation"], one_hot], axis=-1)
        return obs
