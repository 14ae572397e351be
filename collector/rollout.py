"""The pure rollout core: steps a vector env with a policy and builds transitions (no Ray).

Gymnasium's vector envs auto-reset on the step *after* an episode ends (``NEXT_STEP`` mode): that
step ignores the action and returns the first observation of the new episode. The worker drops
those steps, so no stored transition spans two episodes, and it counts only real transitions as
frames. ``terminated`` and ``truncated`` are stored apart: a learner bootstraps through a
truncation but not through a termination.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import gymnasium as gym
import numpy as np


@dataclasses.dataclass
class RolloutBatch:
    """Transitions of one rollout plus the episodes that finished during it."""

    transitions: dict[str, np.ndarray]
    episode_returns: list[float]
    episode_lengths: list[int]

    @property
    def frames(self) -> int:
        """Number of transitions."""
        return len(self.transitions["reward"])


Policy = Callable[[np.ndarray, float], np.ndarray]


class RolloutWorker:
    """Steps a vector env and records transitions, continuing across rollouts.

    Args:
        envs: A gymnasium vector env in ``NEXT_STEP`` autoreset mode.
        policy: ``policy(obs_batch, epsilon) -> actions``.
        seeds: One reset seed per sub-env.
    """

    def __init__(self, envs: gym.vector.VectorEnv, policy: Policy, seeds: list[int]) -> None:
        self.envs = envs
        self.policy = policy
        self.num_envs = envs.num_envs
        self.obs, _ = envs.reset(seed=seeds)
        self.autoreset = np.zeros(self.num_envs, dtype=bool)
        self.episode_return = np.zeros(self.num_envs, dtype=np.float64)
        self.episode_length = np.zeros(self.num_envs, dtype=np.int64)
        self.episodes_done = 0

    def rollout(self, num_steps: int, epsilon: float, policy_version: int) -> RolloutBatch:
        """Steps every sub-env ``num_steps`` times.

        Args:
            num_steps: Vector steps to take (up to ``num_steps * num_envs`` transitions).
            epsilon: Exploration rate handed to the policy.
            policy_version: Stored with every transition, so policy lag can be measured.

        Returns:
            The valid transitions, in time-major order, and finished episodes' statistics.
        """
        n = self.num_envs
        obs_shape = self.obs.shape[1:]
        obs_buf = np.empty((num_steps, n, *obs_shape), dtype=self.obs.dtype)
        next_buf = np.empty_like(obs_buf)
        action_buf = None
        reward_buf = np.empty((num_steps, n), dtype=np.float32)
        term_buf = np.empty((num_steps, n), dtype=bool)
        trunc_buf = np.empty((num_steps, n), dtype=bool)
        valid_buf = np.empty((num_steps, n), dtype=bool)
        returns: list[float] = []
        lengths: list[int] = []
        for t in range(num_steps):
            actions = self.policy(self.obs, epsilon)
            if action_buf is None:
                action_buf = np.empty((num_steps, *actions.shape), dtype=actions.dtype)
            next_obs, reward, terminated, truncated, _ = self.envs.step(actions)
            valid = ~self.autoreset
            obs_buf[t], next_buf[t], action_buf[t] = self.obs, next_obs, actions
            reward_buf[t], term_buf[t], trunc_buf[t], valid_buf[t] = (
                reward,
                terminated,
                truncated,
                valid,
            )
            self.episode_return += np.where(valid, reward, 0.0)
            self.episode_length += valid
            done = (terminated | truncated) & valid
            if done.any():
                returns.extend(self.episode_return[done].tolist())
                lengths.extend(self.episode_length[done].tolist())
                self.episode_return[done] = 0.0
                self.episode_length[done] = 0
                self.episodes_done += int(done.sum())
            self.autoreset = done
            self.obs = next_obs
        mask = valid_buf.reshape(-1)
        frames = int(mask.sum())
        transitions = {
            "observation": obs_buf.reshape(-1, *obs_shape)[mask],
            "action": action_buf.reshape(num_steps * n, *action_buf.shape[2:])[mask],
            "reward": reward_buf.reshape(-1)[mask],
            "next_observation": next_buf.reshape(-1, *obs_shape)[mask],
            "terminated": term_buf.reshape(-1)[mask],
            "truncated": trunc_buf.reshape(-1)[mask],
            "policy_version": np.full(frames, policy_version, dtype=np.int64),
        }
        return RolloutBatch(transitions, returns, lengths)
