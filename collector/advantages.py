"""Advantages and returns built collector-side for on-policy learners (pure numpy, no Ray).

Both functions take time-major arrays ``[T, num_envs]`` of one rollout and treat each env's
column as a sequence of steps, some of which end an episode (``terminated`` or ``truncated``).

Generalized advantage estimation (Schulman et al., 2016), :func:`gae`::

    delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
    target_t = A_t + V(s_t)                       (the critic's regression target)

``V(s_{t+1})`` is the value of the true next state: at a truncation it is the value of the
truncated (final) state, so a time limit bootstraps; at a termination it is multiplied by 0; the
recursion stops at every episode end (``done = terminated | truncated``) and at the rollout's
end, where ``A_{T-1} = delta_{T-1}`` bootstraps from ``V(s_T)``. ``lambda = 1`` gives the
n-step returns of A2C (each step bootstraps from the end of the rollout), ``lambda = 0`` the
one-step TD error.

Monte-Carlo returns (REINFORCE), :func:`returns_to_go`::

    G_t = r_t + gamma * G_{t+1}          within an episode
    G_t = r_t                            at a termination
    G_t = r_t + gamma * B_t              at a truncation, with B_t the bootstrap value of the
                                         truncated state (0 without a value baseline)
"""

from __future__ import annotations

import numpy as np


def gae(
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    *,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimates and value targets of one rollout.

    Args:
        reward: ``[T, n]`` rewards.
        value: ``[T, n]`` critic values ``V(s_t)`` of the observations acted on.
        next_value: ``[T, n]`` values of the true next states ``V(s_{t+1})`` (the truncated
            state's value at a truncation; anything at a termination, it is not used).
        terminated: ``[T, n]`` episode ended by the environment (no bootstrap).
        truncated: ``[T, n]`` episode cut by a time limit (bootstrap from ``next_value``).
        gamma: Discount factor.
        lam: GAE's lambda.

    Returns:
        ``(advantage, value_target)``, float32 ``[T, n]``.

    Examples:
        >>> reward = np.array([[1.0], [1.0], [1.0]])
        >>> value = np.zeros((3, 1)); next_value = np.full((3, 1), 10.0)
        >>> done = np.array([[False], [True], [False]])
        >>> advantage, _ = gae(reward, value, next_value, done, np.zeros_like(done),
        ...                    gamma=0.5, lam=1.0)
        >>> advantage[:, 0].tolist()  # step 1 terminates; step 2 bootstraps from V(s_3)
        [6.5, 1.0, 6.0]
    """
    terminated = np.asarray(terminated, dtype=bool)
    done = terminated | np.asarray(truncated, dtype=bool)
    bootstrap = np.where(terminated, 0.0, next_value)
    delta = reward + gamma * bootstrap - value
    carry = np.where(done, 0.0, gamma * lam)
    advantage = np.empty(delta.shape, dtype=np.float64)
    running = np.zeros(delta.shape[1:], dtype=np.float64)
    for t in range(len(delta) - 1, -1, -1):
        running = delta[t] + carry[t] * running
        advantage[t] = running
    return advantage.astype(np.float32), (advantage + value).astype(np.float32)


def returns_to_go(
    reward: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    *,
    gamma: float,
    bootstrap: np.ndarray | None = None,
) -> np.ndarray:
    """Discounted Monte-Carlo returns of complete episodes.

    Every episode in the arrays must end inside them (a step with ``terminated`` or
    ``truncated``); steps after an env's last episode end must be masked out by the caller.

    Args:
        reward: ``[T, n]`` rewards.
        terminated: ``[T, n]`` episode ended by the environment.
        truncated: ``[T, n]`` episode cut by a time limit.
        gamma: Discount factor.
        bootstrap: ``[T, n]`` value of the truncated state, used at truncations (None: 0).

    Returns:
        float32 ``[T, n]`` returns ``G_t``.

    Examples:
        >>> reward = np.array([[1.0], [2.0], [4.0]])
        >>> end = np.array([[False], [False], [True]])
        >>> returns_to_go(reward, end, np.zeros_like(end), gamma=0.5)[:, 0].tolist()
        [3.0, 4.0, 4.0]
    """
    done = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
    tail = np.zeros(reward.shape, dtype=np.float64)
    if bootstrap is not None:
        tail = np.where(np.asarray(truncated, dtype=bool), bootstrap, 0.0)
    returns = np.empty(reward.shape, dtype=np.float64)
    running = np.zeros(reward.shape[1:], dtype=np.float64)
    for t in range(len(reward) - 1, -1, -1):
        running = reward[t] + gamma * np.where(done[t], tail[t], running)
        returns[t] = running
    return returns.astype(np.float32)
