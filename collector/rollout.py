"""The pure rollout core: steps a vector env with a policy and builds transitions (no Ray).

Gymnasium's vector envs auto-reset on the step *after* an episode ends (``NEXT_STEP`` mode): that
step ignores the action, returns the first observation of the new episode and reports neither
termination nor truncation. The worker marks those steps invalid, so no stored transition spans
two episodes, and it counts only real transitions as frames. ``terminated`` and ``truncated`` are
stored apart: a learner bootstraps through a truncation (from the truncated state, which is the
stored ``next_observation``) but not through a termination. N-step windows are built by
:class:`collector.nstep.NStepBuffer` and stay open across rollouts.

Observations may be arrays or mappings of arrays (gymnasium ``Dict`` spaces, or the multi-agent
envs of ``collector.envs.multiagent``: agents' observations and the global state); each entry is
stored under its own key (see :mod:`collector.nstep`).

With ``action_mask_key`` (``collector.envs.masks``) the policy acts under each observation's
action mask, the masks are stored as ``action_mask`` and ``next_action_mask`` (the n-step
window's last state, for the learner's target) and :attr:`RolloutWorker.masks` counts the actions
a mask forbids.

The step loop does only what must happen per step (policy, env step, five buffer writes); the
validity mask and the episode statistics are computed afterwards, vectorized over the rollout.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import torch

from collector.envs.episodes import CountsEpisodes, EpisodeTracker
from collector.envs.framestream import FrameStreamBuffer
from collector.envs.masks import MASK_COLUMN, mask_reader
from collector.envs.spaces import ObservationDict, stored
from collector.nstep import NStepBuffer


@dataclasses.dataclass
class RolloutBatch:
    """Transitions of one rollout plus the episodes that finished during it.

    Attributes:
        transitions: Items to write, one row each.
        episode_returns: Returns of the episodes that finished during the rollout.
        episode_lengths: Their lengths.
        counted: Env steps the items hold when an item is more than one step (the chunks of
            ``collector.chunks``); None: one step per item.
        invalid_actions: Actions taken that the env's action mask forbids (must stay 0).
    """

    transitions: dict[str, np.ndarray]
    episode_returns: list[float]
    episode_lengths: list[int]
    counted: int | None = None
    invalid_actions: int = 0

    @property
    def frames(self) -> int:
        """Number of transitions (env steps) the rollout holds."""
        if self.counted is not None:
            return self.counted
        return len(self.transitions["reward"])


class RolloutWorker(CountsEpisodes):
    """Steps a vector env and records transitions, continuing across rollouts.

    Args:
        envs: A gymnasium vector env in ``NEXT_STEP`` autoreset mode.
        policy: Has ``act(obs_batch, explore) -> (actions, extras)`` (see
            ``collector.networks.q_mlp``).
        seeds: One reset seed per sub-env.

    Keyword Args:
        n_step: Steps per transition window (1: one-step transitions).
        gamma: Discount of the n-step returns.
        frame_stack: 0 keeps stacked observations in the transitions; ``S >= 1`` sends them as
            a frame stream for frame-deduplicated replay (``collector.envs.framestream``).
        frame_key: With ``frame_stack``, the image key of a ``Dict`` observation whose stacks
            are sent as the frame stream (``collector.image_keys``); the other keys travel as
            columns. ``""``: a plain stacked observation.
        action_mask_key: Where the envs report action masks (``collector.envs.masks``);
            None: no masks.

    Examples:
        >>> from collector.envs.vector import make_vector_env
        >>> from collector.networks.q_mlp import ModelSpec
        >>> spec = ModelSpec(4, 2)
        >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
        >>> worker = RolloutWorker(make_vector_env("CartPole-v1", 2), policy, [1, 2], n_step=3)
        >>> batch = worker.rollout(num_steps=10, explore={"epsilon": 1.0}, policy_version=0)
        >>> batch.frames <= 2 * (10 - 2)  # the last n - 1 steps' windows are still open
        True
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        policy,
        seeds: list[int],
        *,
        n_step: int = 1,
        gamma: float = 0.99,
        frame_stack: int = 0,
        action_mask_key: str | None = None,
        frame_key: str = "",
    ) -> None:
        self.envs = envs
        self.policy = policy
        self.num_envs = envs.num_envs
        self.nstep = NStepBuffer(n_step, gamma)
        self.windows = (
            FrameStreamBuffer(self.nstep, self.num_envs, frame_key, frame_stack)
            if frame_stack
            else self.nstep
        )
        space = envs.single_action_space
        self.action_bounds = (space.low, space.high) if isinstance(space, gym.spaces.Box) else None
        self.episodes_tracker = EpisodeTracker(self.num_envs)
        self.masks = mask_reader(envs, action_mask_key)
        self.stored_keys = isinstance(envs.single_observation_space, ObservationDict)
        self.frames = 0
        self.reset(seeds)

    def reset(self, seeds: list[int]) -> None:
        """Starts fresh episodes from ``seeds``; open n-step windows and partial episodes go."""
        self.obs, info = self.envs.reset(seed=seeds)
        self.mask = None if self.masks is None else self.masks.read(info)
        self.autoreset = np.zeros(self.num_envs, dtype=bool)
        self.episodes_tracker.reset()
        self.windows.clear()

    def rollout(
        self, num_steps: int, explore, policy_version: int, *, seeds: list[int] | None = None
    ) -> RolloutBatch:
        """Steps every sub-env ``num_steps`` times.

        Args:
            num_steps: Vector steps to take.
            explore: Exploration parameters handed to the policy (a float is an epsilon).
            policy_version: Stored with every transition, so policy lag can be measured.
            seeds: Unused (episodes continue across rollouts); kept for the worker interface.

        Returns:
            The transitions whose n-step windows completed, time-major then env order, and the
            statistics of episodes that finished during the rollout.
        """
        n = self.num_envs
        obs = self.obs
        keyed = isinstance(obs, dict)
        obs_buf = _obs_buffer(obs, num_steps + 1)
        reward_buf = np.empty((num_steps, n), dtype=np.float32)
        term_buf = np.empty((num_steps, n), dtype=bool)
        trunc_buf = np.empty((num_steps, n), dtype=bool)
        action_buf = extra_bufs = None
        act, step, bounds = self.policy.act, self.envs.step, self.action_bounds
        masks, mask = self.masks, self.mask
        mask_buf = None if masks is None else _obs_buffer(mask, num_steps + 1)
        with torch.inference_mode():
            for t in range(num_steps):
                if masks is None:
                    actions, extras = act(obs, explore)
                else:
                    actions, extras = act(obs, explore, mask=mask)
                if action_buf is None:
                    action_buf = np.empty((num_steps, *actions.shape), dtype=actions.dtype)
                    extra_bufs = {
                        k: np.empty((num_steps, *v.shape), v.dtype) for k, v in extras.items()
                    }
                action_buf[t] = actions
                if extras:
                    for key, value in extras.items():
                        extra_bufs[key][t] = value
                if bounds is not None:
                    actions = np.clip(actions, *bounds)
                obs, reward_buf[t], term_buf[t], trunc_buf[t], info = step(actions)
                if masks is not None:
                    mask = mask_buf[t + 1] = masks.read(info)
                if keyed:
                    for key, value in obs.items():
                        obs_buf[key][t + 1] = value
                else:
                    obs_buf[t + 1] = obs
        self.obs, self.mask = obs, mask
        done = term_buf | trunc_buf
        valid = np.empty((num_steps, n), dtype=bool)
        valid[0] = ~self.autoreset
        valid[1:] = ~done[:-1]
        self.autoreset = done[-1].copy()
        returns, lengths = self.episodes_tracker.update(reward_buf, valid, done)
        steps = {
            "action": action_buf,
            "reward": reward_buf,
            "terminated": term_buf,
            "truncated": trunc_buf,
            "valid": valid,
            "policy_version": np.full((num_steps, n), policy_version, dtype=np.int64),
            **extra_bufs,
        }
        if self.stored_keys:  # a flattened Dict/Tuple observation: one column per key
            obs_buf = stored(obs_buf)
        invalid = 0
        if masks is not None:  # stored as action_mask and next_action_mask (collector.nstep)
            invalid = masks.count(action_buf[valid], mask_buf[:-1][valid])
            columns = obs_buf if isinstance(obs_buf, dict) else {"observation": obs_buf}
            obs_buf = {**columns, MASK_COLUMN: mask_buf}
        batch = RolloutBatch(self.windows.add(steps, obs_buf), returns, lengths)
        batch.invalid_actions = invalid
        self.frames += batch.frames
        return batch


def _obs_buffer(obs, length: int):
    """A time-major buffer ``[length, num_envs, ...]`` (one per mapping entry), step 0 ``obs``."""
    if isinstance(obs, dict):
        return {key: _obs_buffer(value, length) for key, value in obs.items()}
    buffer = np.empty((length, *obs.shape), dtype=obs.dtype)
    buffer[0] = obs
    return buffer
