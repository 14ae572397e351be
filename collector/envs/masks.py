"""Action masks: read from the env, kept out of the observation, applied to logits and Q-values.

With ``collector.action_mask_key: action_mask`` every sub-env is wrapped in :class:`MaskToInfo`:
a ``Dict`` observation's ``action_mask`` entry (PettingZoo's classic games carry one) is taken
out of the observation and reported in ``info["action_mask"]`` instead, and a ``Dict`` left
with a single key is unwrapped to that key's value, so connect4's
``{observation: Box(6, 7, 2), action_mask: Box(7)}`` becomes a ``Box`` observation plus a mask.
An env that reports the mask in its ``info`` already passes through unchanged. The workers
(``collector.rollout``, ``collector.onpolicy``, ``collector.chunks``) read the mask of the
observation they act on from the vector env's info (:func:`vector_mask`), hand it to the policy
(``act(obs, explore, mask=mask)``), store it as the column ``action_mask`` (and, for n-step
transitions, ``next_action_mask``: the mask of the window's last state, which DQN's target
needs) and count the actions it forbids (:func:`count_invalid`; the run's summary reports the
sum as ``invalid_actions``, which must stay 0).

A mask is a bool array over the flat action choices: ``[n]`` for ``Discrete(n)``, and the
concatenated per-dimension masks (``[sum(nvec)]``) for ``MultiDiscrete(nvec)``. True: allowed.
The multi-agent wrapper (``collector.envs.multiagent``) reports one mask per agent instead,
``[n_agents, n_actions]`` (its ``mask_shape``), which the reader keeps in that shape. A state
whose mask allows nothing (for one agent: that agent's row) is treated as allowing everything
(no action could be valid; the env decides what happens), so sampling never divides by zero.

Examples:
    >>> import numpy as np
    >>> info = {"action_mask": np.array([[1, 0, 1], [0, 0, 0]], np.int8),
    ...         "_action_mask": np.array([True, True])}
    >>> vector_mask(info, "action_mask", 2, 3).astype(int).tolist()
    [[1, 0, 1], [1, 1, 1]]
    >>> count_invalid(np.array([1, 2]), vector_mask(info, "action_mask", 2, 3))
    1
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

MASK_COLUMN = "action_mask"
NEXT_MASK_COLUMN = "next_action_mask"


def mask_width(action_space: gym.Space) -> int:
    """The length of a mask over ``action_space``'s flat choices.

    Raises:
        ValueError: Naming ``collector.action_mask_key`` for spaces a mask cannot cover.
    """
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, gym.spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
        return int(action_space.nvec.sum())
    raise ValueError(
        "collector.action_mask_key: masks cover Discrete or MultiDiscrete actions, "
        f"not {action_space}"
    )


def strip_mask_space(obs_space: gym.Space, key: str) -> gym.Space:
    """The observation space without its mask entry (a single remaining entry unwrapped).

    Examples:
        >>> space = gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (3,)),
        ...                          "action_mask": gym.spaces.Box(0, 1, (2,), np.int8)})
        >>> strip_mask_space(space, "action_mask")
        Box(0.0, 1.0, (3,), float32)
    """
    if not isinstance(obs_space, gym.spaces.Dict) or key not in obs_space.spaces:
        return obs_space
    rest = {k: v for k, v in obs_space.spaces.items() if k != key}
    if len(rest) == 1:
        return next(iter(rest.values()))
    return gym.spaces.Dict(rest)


class MaskToInfo(gym.Wrapper):
    """Moves the observation's mask entry ``key`` into ``info[key]`` (see the module docstring).

    Args:
        env: The env; its observation is a ``Dict`` holding ``key``, or its info carries it.
        key: ``collector.action_mask_key``.
    """

    def __init__(self, env: gym.Env, key: str) -> None:
        super().__init__(env)
        self.key = key
        self.in_obs = isinstance(env.observation_space, gym.spaces.Dict) and (
            key in env.observation_space.spaces
        )
        self.observation_space = strip_mask_space(env.observation_space, key)
        self.unwrap = self.in_obs and not isinstance(self.observation_space, gym.spaces.Dict)

    def _split(self, obs, info: dict):
        if not self.in_obs:
            return obs, info
        obs = dict(obs)
        info = {**info, self.key: np.asarray(obs.pop(self.key)).astype(bool)}
        return (next(iter(obs.values())) if self.unwrap else obs), info

    def reset(self, *, seed=None, options=None):
        """Resets the env; the mask of the first observation goes to the info."""
        return self._split(*self.env.reset(seed=seed, options=options))

    def step(self, action):
        """Steps the env; the mask of the returned observation goes to the info."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs, info = self._split(obs, info)
        return obs, reward, terminated, truncated, info


def vector_mask(info: dict, key: str, num_envs: int, width: int | tuple[int, ...]) -> np.ndarray:
    """The bool masks ``[num_envs, width]`` in a vector env's ``info`` (all True where absent).

    ``width`` may be a shape (``[n_agents, n_actions]``: the multi-agent wrapper's masks).
    """
    shape = (width,) if isinstance(width, int) else tuple(width)
    mask = np.ones((num_envs, *shape), dtype=bool)
    values = info.get(key)
    if values is not None:
        present = np.asarray(info.get(f"_{key}", np.ones(num_envs, dtype=bool)), dtype=bool)
        mask[present] = np.asarray(values, dtype=bool).reshape(num_envs, *shape)[present]
    mask[~mask.any(-1)] = True  # nothing allowed: treat all as allowed (see module docstring)
    return mask


def count_invalid(actions: np.ndarray, mask: np.ndarray, nvec: np.ndarray | None = None) -> int:
    """Actions the mask forbids (``nvec``: a ``MultiDiscrete``'s sizes; per-dimension masks).

    Without ``nvec`` every action indexes the last axis of its mask: ``[k]`` actions under
    ``[k, width]`` masks, or ``[k, n_agents]`` under per-agent ``[k, n_agents, n_actions]``.
    """
    actions = np.asarray(actions)
    if nvec is None:
        index = actions.reshape(*mask.shape[:-1], 1)
        return int((~np.take_along_axis(mask, index, -1)).sum())
    offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
    return int((~np.take_along_axis(mask, actions + offsets, -1)).sum())


class MaskReader:
    """What a worker keeps to read, count and store its env's masks.

    Args:
        key: ``collector.action_mask_key``.
        action_space: The env's single action space.
        num_envs: Sub-envs.

    Keyword Args:
        shape: One env's mask shape when it is not flat (the multi-agent wrapper's
            ``[n_agents, n_actions]``: one mask per agent); None: ``[mask_width(action_space)]``.
    """

    def __init__(
        self,
        key: str,
        action_space: gym.Space,
        num_envs: int,
        *,
        shape: tuple[int, ...] | None = None,
    ) -> None:
        self.key = key
        self.width: int | tuple[int, ...] = mask_width(action_space) if shape is None else shape
        self.num_envs = num_envs
        self.nvec = (
            np.asarray(action_space.nvec)
            if shape is None and isinstance(action_space, gym.spaces.MultiDiscrete)
            else None
        )
        self.invalid_actions = 0

    def read(self, info: dict) -> np.ndarray:
        """The masks of the observations the info came with."""
        return vector_mask(info, self.key, self.num_envs, self.width)

    def count(self, actions: np.ndarray, mask: np.ndarray) -> int:
        """Counts (and adds to :attr:`invalid_actions`) the actions ``mask`` forbids.

        Args:
            actions: ``[k]`` (or ``[k, dims]``, ``[k, n_agents]``) actions of real transitions
                (not auto-resets).
            mask: ``[k, width]`` (or ``[k, n_agents, n_actions]``): the masks they were taken
                under.
        """
        invalid = count_invalid(actions, mask, self.nvec) if len(actions) else 0
        self.invalid_actions += invalid
        return invalid


def mask_reader(envs: gym.vector.VectorEnv, key: str | None) -> MaskReader | None:
    """A :class:`MaskReader` for ``envs`` when ``key`` is set, else None.

    Envs with a ``mask_shape`` (the multi-agent wrapper: ``[n_agents, n_actions]``) keep their
    masks in that shape.
    """
    if not key:
        return None
    shape = getattr(envs, "mask_shape", None)
    return MaskReader(key, envs.single_action_space, envs.num_envs, shape=shape)
