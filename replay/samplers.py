"""Index samplers over a storage of ``size`` filled slots."""

from __future__ import annotations

import numpy as np


class EmptyReplayError(RuntimeError):
    """Sampling was asked of a table that holds nothing."""


class UniformSampler:
    """Draws slots uniformly with replacement from the filled part of the storage."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def sample(self, size: int, batch_size: int) -> np.ndarray:
        """Returns ``batch_size`` slot indices in ``[0, size)``.

        Raises:
            EmptyReplayError: If ``size`` is 0.
        """
        if size <= 0:
            raise EmptyReplayError("cannot sample from an empty replay table")
        return self.rng.integers(0, size, size=batch_size, dtype=np.int64)
