"""Recurrent on-policy rollouts as stored sequences (no Ray, no torch).

A recurrent policy (``learner.recurrent``) is trained by truncated backpropagation through time
over the steps it acted on, so the lockstep collectors (``collector.onpolicy``) store one item
per *sequence*, not per step: ``L`` consecutive steps of one env (``L`` =
``learner.onpolicy.bptt_length``, or the rollout's whole length per env), with

    recurrent_state [S]     the policy's state before the sequence's first step
    reset [L]               True where a step is an episode's first (the state is zeroed there)
    valid [L]               False on padding (never trained on, never counted)
    policy_version          one per sequence
    observation [L, ...], action, log_prob, value, advantage, value_target, reward,
    terminated, truncated [L]   as in a feed-forward rollout, per step

A sequence may span episodes (``reset`` marks where one starts, the learner zeroes the state
there as the collector did); the advantages are computed collector-side on the time-major
rollout before it is cut, so a cut never changes a target. Rows with ragged ends (complete
episodes, REINFORCE) are padded: a sequence whose steps are all padding is not stored.

Examples:
    >>> steps = {"reward": np.arange(8, dtype=np.float32).reshape(4, 2)}  # [T=4, n=2]
    >>> starts = np.zeros((2, 2, 3), np.float32)  # the states before steps 0 and 2
    >>> valid = np.ones((4, 2), bool)
    >>> items = to_sequences(steps, starts, valid, length=2)
    >>> items["reward"].tolist()  # env 0's steps 0-1 and 2-3, then env 1's
    [[0.0, 2.0], [4.0, 6.0], [1.0, 3.0], [5.0, 7.0]]
    >>> items["recurrent_state"].shape, items["valid"].shape
    ((4, 3), (4, 2))
"""

from __future__ import annotations

import numpy as np

STATE_COLUMN = "recurrent_state"
RESET_COLUMN = "reset"

__all__ = ["RESET_COLUMN", "STATE_COLUMN", "to_sequences"]


def to_sequences(
    steps: dict[str, np.ndarray], starts: np.ndarray, valid: np.ndarray, length: int
) -> dict[str, np.ndarray]:
    """Cuts time-major rollout columns into per-env sequences of ``length`` steps.

    Args:
        steps: Columns ``[T, n, ...]``.
        starts: ``[ceil(T / length), n, S]``: the state before steps ``0, length, 2 length..``.
        valid: Bool ``[T, n]``: False where a step is not a transition (padding).
        length: Steps per sequence; ``T`` is padded up to a multiple of it (``valid`` False).

    Returns:
        Columns ``[items, length, ...]`` plus ``recurrent_state [items, S]`` and ``valid``,
        items ordered by env then time; sequences without a valid step are left out.
    """
    num_steps, num_envs = valid.shape
    pieces = -(-num_steps // length)
    pad = pieces * length - num_steps
    columns = {**steps, "valid": valid}
    out = {}
    for key, value in columns.items():
        value = np.asarray(value)
        if pad:
            padding = np.zeros((pad, *value.shape[1:]), dtype=value.dtype)
            value = np.concatenate([value, padding])
        value = np.swapaxes(value, 0, 1)  # [n, T', ...]
        out[key] = value.reshape(num_envs * pieces, length, *value.shape[2:])
    first = np.swapaxes(starts, 0, 1)  # [n, pieces, S]
    out[STATE_COLUMN] = np.ascontiguousarray(first.reshape(num_envs * pieces, -1))
    kept = out["valid"].any(axis=1)
    if not kept.all():
        out = {key: value[kept] for key, value in out.items()}
    return {key: np.ascontiguousarray(value) for key, value in out.items()}
