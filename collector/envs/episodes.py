"""Per-env episode statistics over rollouts (pure numpy, no Ray)."""

from __future__ import annotations

import numpy as np


class EpisodeTracker:
    """Returns and lengths of the episodes that end, carrying partial episodes across rollouts.

    Args:
        num_envs: Sub-environments tracked.

    Examples:
        >>> tracker = EpisodeTracker(1)
        >>> reward = np.ones((3, 1)); valid = np.ones((3, 1), bool)
        >>> tracker.update(reward, valid, np.array([[False], [True], [False]]))
        ([2.0], [2])
        >>> tracker.update(reward, valid, np.array([[True], [False], [False]]))  # 1 carried in
        ([2.0], [2])
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.episodes = 0
        self.reset()

    def reset(self) -> None:
        """Forgets partial episodes (after the envs were reset)."""
        self.episode_return = np.zeros(self.num_envs, dtype=np.float64)
        self.episode_length = np.zeros(self.num_envs, dtype=np.int64)

    def update(
        self, reward: np.ndarray, valid: np.ndarray, done: np.ndarray
    ) -> tuple[list[float], list[int]]:
        """Adds a rollout's ``[T, num_envs]`` steps; returns the finished episodes' statistics.

        Args:
            reward: Rewards.
            valid: Steps that belong to an episode (auto-reset steps do not).
            done: Steps that end an episode.
        """
        return_sum = np.cumsum(np.where(valid, reward, 0.0), axis=0)
        length_sum = np.cumsum(valid, axis=0, dtype=np.int64)
        # Per env, the cumulative sums at its last episode end, shifted by the partial episode
        # carried in from earlier rollouts.
        return_base = -self.episode_return
        length_base = -self.episode_length
        returns: list[float] = []
        lengths: list[int] = []
        for t, e in zip(*np.nonzero(done), strict=True):
            returns.append(float(return_sum[t, e] - return_base[e]))
            lengths.append(int(length_sum[t, e] - length_base[e]))
            return_base[e] = return_sum[t, e]
            length_base[e] = length_sum[t, e]
        self.episode_return = return_sum[-1] - return_base
        self.episode_length = length_sum[-1] - length_base
        self.episodes += len(returns)
        return returns, lengths


class CountsEpisodes:
    """Mixin of the rollout workers: ``episodes`` finished so far, kept by ``episodes_tracker``.

    The setter restores the count from a collector's checkpointed state.
    """

    episodes_tracker: EpisodeTracker

    @property
    def episodes(self) -> int:
        """Episodes finished so far."""
        return self.episodes_tracker.episodes

    @episodes.setter
    def episodes(self, value: int) -> None:
        self.episodes_tracker.episodes = value
