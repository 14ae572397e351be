"""The state of a recurrent policy between steps, as ``Policy.act`` takes and returns it.

A policy trained with ``learner.recurrent`` (``collector.networks.recurrent``) remembers through
a state the caller carries: ``policy.initial_state()`` (zeros, an episode's first step) goes in
with the first observation, and each ``act`` returns the state to hand to the next one. The
state of one observation is ``[state_size]``, of a batch ``[B, state_size]`` (a row per env),
float32, numpy or torch like the observation; :class:`StateInput` checks it and converts it.

Examples:
    >>> states = StateInput(4)
    >>> states.initial(), states.initial(2).shape
    (array([0., 0., 0., 0.], dtype=float32), (2, 4))
    >>> states.batched(None, 3, single=False).shape  # None: an episode's first step
    (3, 4)
    >>> states.returned(np.ones((1, 4), np.float32), single=True, as_torch=False, device=None)
    array([1., 1., 1., 1.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class StateInput:
    """Checks the state a caller hands to ``act`` and shapes the one it gets back.

    Args:
        state_size: Width of the state (``2 * hidden`` for an LSTM, ``hidden`` for a GRU).
    """

    def __init__(self, state_size: int) -> None:
        self.state_size = state_size

    def initial(self, batch: int | None = None) -> np.ndarray:
        """Zeros ``[state_size]`` (``batch`` None) or ``[batch, state_size]``, float32."""
        shape = (self.state_size,) if batch is None else (batch, self.state_size)
        return np.zeros(shape, np.float32)

    def batched(self, state: Any, size: int, *, single: bool) -> np.ndarray:
        """``state`` as float32 ``[size, state_size]`` (None: zeros).

        Args:
            state: ``[state_size]`` for one observation, ``[size, state_size]`` for a batch,
                numpy or torch, or None.
            size: Rows of the observation batch.
            single: Whether the observation was one observation (``size`` 1, added).

        Raises:
            ValueError: Naming the state shape expected.
        """
        if state is None:
            return self.initial(size)
        if isinstance(state, torch.Tensor):
            state = state.detach().cpu().numpy()
        array = np.asarray(state, np.float32)
        expected = (self.state_size,) if single else (size, self.state_size)
        if array.shape != expected:
            raise ValueError(
                f"state: expected {list(expected)} (the state act returned, or "
                f"policy.initial_state({'' if single else size})), got {list(array.shape)}"
            )
        return array[None] if single else array

    def returned(self, next_state, *, single: bool, as_torch: bool, device) -> Any:
        """The next state as the caller handed the observation: unbatched, numpy or torch."""
        if isinstance(next_state, torch.Tensor):
            next_state = next_state.detach().cpu().numpy()
        array = np.asarray(next_state, np.float32)
        array = array[0] if single else array
        return torch.as_tensor(array, device=device) if as_torch else array
