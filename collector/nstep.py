"""N-step transitions built collector-side, exact at episode ends and across rollouts (no Ray).

For a step ``t`` of one env, the window covers steps ``t .. t+k-1`` where ``k = n`` unless the
episode ends first (at its terminating or truncating step, which is included)::

    reward            = sum_{i<k} gamma^i r_{t+i}
    next_observation  = o_{t+k}                  (the terminal or truncated state if it ended)
    n_step_discount   = gamma^k
    terminated        = the window ended with a termination (no bootstrap)
    truncated         = the window ended with a truncation (bootstrap from o_{t+k})

so a learner's target is ``reward + n_step_discount * (1 - terminated) * V(next_observation)``.
With ``n = 1`` this is the ordinary one-step transition with ``n_step_discount = gamma``.

Observations may be one array or a mapping of arrays (a gymnasium ``Dict`` observation, or a
multi-agent env's ``{"observation": [num_envs, n_agents, ...], "state": [num_envs, ...]}``): each
entry ``key`` is stored as ``key`` (at the window's start) and ``next_key`` (after its end); a
plain array is stored as ``observation`` and ``next_observation``.

A window is emitted only once it is complete; the last ``n - 1`` steps of a rollout wait for the
next rollout, so a rollout boundary never cuts a window short. Steps that only auto-reset an
env (``valid`` false) are never the start of a window, and no window crosses one, because every
auto-reset step follows an episode end.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

STEP_KEYS = ("action", "reward", "terminated", "truncated", "valid", "policy_version")


class NStepBuffer:
    """Turns time-major steps ``[T, num_envs, ...]`` into flat n-step transitions.

    Args:
        n: Steps per window (1: one-step transitions).
        gamma: Discount factor.

    Examples:
        >>> buffer = NStepBuffer(n=2, gamma=0.5)
        >>> steps = {
        ...     "action": np.zeros((3, 1), np.int64),
        ...     "reward": np.array([[1.0], [2.0], [4.0]], np.float32),
        ...     "terminated": np.array([[False], [False], [True]]),
        ...     "truncated": np.zeros((3, 1), bool),
        ...     "valid": np.ones((3, 1), bool),
        ...     "policy_version": np.zeros((3, 1), np.int64),
        ... }
        >>> out = buffer.add(steps, np.arange(4, dtype=np.float32).reshape(4, 1, 1))
        >>> out["reward"].tolist(), out["n_step_discount"].tolist(), out["terminated"].tolist()
        ([2.0, 4.0], [0.25, 0.25], [False, True])
        >>> len(buffer)  # the window of the last step waits for the next rollout
        1
    """

    def __init__(self, n: int = 1, gamma: float = 0.99) -> None:
        if n < 1:
            raise ValueError(f"n_step: must be >= 1, got {n!r}")
        if not 0 <= gamma <= 1:
            raise ValueError(f"gamma: must be in [0, 1], got {gamma!r}")
        self.n = n
        self.gamma = gamma
        self.discounts = gamma ** np.arange(n + 1, dtype=np.float64)
        self.pending: dict[str, np.ndarray] | None = None
        self.pending_obs: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        """Vector steps whose windows are still open."""
        return 0 if self.pending is None else len(self.pending["reward"])

    def clear(self) -> None:
        """Drops open windows (after envs were reset without finishing their episodes)."""
        self.pending = None
        self.pending_obs = None

    def add(
        self, steps: dict[str, np.ndarray], obs: np.ndarray | Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Adds one rollout's steps and returns the transitions whose windows are complete.

        Args:
            steps: Time-major arrays ``[T, num_envs, ...]``: ``STEP_KEYS`` plus any extras
                (e.g. ``log_prob``, ``value``), which are taken from a window's first step.
            obs: Observations ``[T + 1, num_envs, ...]``; ``obs[t + 1]`` follows step ``t``. A
                mapping of such arrays stores each entry ``key`` as ``key`` and ``next_key``.

        Returns:
            Flat arrays, time-major then env order: ``observation``, ``action``, ``reward``,
            ``next_observation`` (or each observation entry and its ``next_`` twin),
            ``terminated``, ``truncated``, ``n_step_discount``, ``policy_version`` and the
            extras, for valid window starts only.
        """
        obs = dict(obs) if isinstance(obs, Mapping) else {"observation": obs}
        if self.pending is not None:
            steps = {k: np.concatenate([self.pending[k], v]) for k, v in steps.items()}
            obs = {k: np.concatenate([self.pending_obs[k], v]) for k, v in obs.items()}
        length = len(steps["reward"])
        starts = max(0, length - self.n + 1)
        reward, terminated, truncated = steps["reward"], steps["terminated"], steps["truncated"]
        if self.n == 1:
            ret, ends, term, trunc = reward, None, terminated, truncated
            next_obs = {k: v[1:] for k, v in obs.items()}
            discount = np.full(reward.shape, self.gamma, dtype=np.float32)
        else:
            ret, ends, term, trunc = self._windows(reward, terminated, truncated, starts)
            rows = np.arange(starts)[:, None] + ends + 1
            envs = np.arange(reward.shape[1])[None, :]
            next_obs = {k: v[rows, envs] for k, v in obs.items()}
            discount = self.discounts[ends + 1].astype(np.float32)
        mask = steps["valid"][:starts]
        # Key order as ever for a plain observation: observation, action, reward,
        # next_observation, ... (what the gRPC transition spec and old replays list).
        out = {key: value[:starts][mask] for key, value in obs.items()}
        out |= {
            "action": steps["action"][:starts][mask],
            "reward": ret[mask].astype(np.float32),
        }
        out |= {f"next_{key}": next_obs[key][mask] for key in obs}
        out |= {
            "terminated": term[mask],
            "truncated": trunc[mask],
            "n_step_discount": discount[mask],
            "policy_version": steps["policy_version"][:starts][mask],
        }
        for key, value in steps.items():
            if key not in STEP_KEYS:
                out[key] = value[:starts][mask]
        if starts < length:
            self.pending = {k: v[starts:] for k, v in steps.items()}
            self.pending_obs = {k: v[starts:length] for k, v in obs.items()}
        else:
            self.clear()
        return out

    def _windows(self, reward, terminated, truncated, starts):
        """Discounted sums and end offsets of the windows starting at ``0 .. starts-1``."""
        shape = (starts, reward.shape[1])
        ret = np.zeros(shape, dtype=np.float64)
        ends = np.zeros(shape, dtype=np.int64)
        term = np.zeros(shape, dtype=bool)
        trunc = np.zeros(shape, dtype=bool)
        alive = np.ones(shape, dtype=bool)
        for k in range(self.n):
            ret += np.where(alive, reward[k : k + starts], 0.0) * self.discounts[k]
            ends[alive] = k
            step_term = alive & terminated[k : k + starts]
            step_trunc = alive & truncated[k : k + starts]
            term |= step_term
            trunc |= step_trunc
            alive &= ~(step_term | step_trunc)
        return ret, ends, term, trunc
