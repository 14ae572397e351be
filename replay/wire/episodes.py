"""The episode fields of an external batch: finite returns, lengths >= 1, ends the batch proves.

Split from :mod:`replay.wire.batches` (which re-exports these names).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from replay.wire.errors import BatchError


def check_episodes(returns: Sequence[float], lengths: Sequence[int]) -> None:
    """Episode returns must be finite and lengths >= 1, one length per return.

    Raises:
        BatchError: Naming ``episode_returns`` or ``episode_lengths``.
    """
    if len(returns) != len(lengths):
        raise BatchError(
            f"episode_lengths: one length per episode return, got {len(lengths)} for {len(returns)}"
        )
    if returns and not all(math.isfinite(value) for value in returns):
        raise BatchError("episode_returns: must be finite (no NaN or infinity)")
    if lengths and min(lengths) < 1:
        raise BatchError(f"episode_lengths: must be >= 1, got {min(lengths)}")


def episode_ends(arrays: dict[str, np.ndarray]) -> int:
    """Transitions of a batch that end an episode (``terminated`` or ``truncated``).

    Examples:
        >>> episode_ends({"terminated": np.array([0, 1, 0], bool), "truncated": np.ones(3, bool)})
        3
    """
    ends = None
    for key in ("terminated", "truncated"):
        flags = arrays.get(key)
        if flags is not None and len(flags):
            flags = np.asarray(flags).reshape(len(flags), -1).any(axis=1)
            ends = flags if ends is None else ends | flags
    return 0 if ends is None else int(ends.sum())


def check_episodes_proven(returns: Sequence[float], arrays: dict[str, np.ndarray]) -> None:
    """At most one finished episode per transition of the batch that ends one.

    Raises:
        BatchError: Naming ``episode_returns``.
    """
    if returns and len(returns) > (proven := episode_ends(arrays)):
        raise BatchError(
            f"episode_returns: {len(returns)} finished episodes, but only {proven} of the "
            "batch's transitions end an episode (terminated or truncated)"
        )


__all__ = ["check_episodes", "check_episodes_proven", "episode_ends"]
