"""Frame stacks for pixel policies fed one frame at a time.

The Atari envs of ``collector.atari`` already return stacked frames ``[S, H, W]`` (the policy
takes those as they are). A user stepping an env of single preprocessed frames ``[H, W]`` hands
them to ``Policy.act`` one by one; :class:`FrameStack` keeps the last ``S``, the first frame of
an episode repeated, as gymnasium's ``FrameStackObservation`` (``padding_type="reset"``) does.

Examples:
    >>> stack = FrameStack(3)
    >>> stack.push(np.full((2, 2), 1, np.uint8))[:, 0, 0]
    array([1, 1, 1], dtype=uint8)
    >>> stack.push(np.full((2, 2), 2, np.uint8))[:, 0, 0]
    array([1, 1, 2], dtype=uint8)
    >>> stack.reset()
    >>> stack.push(np.full((2, 2), 5, np.uint8))[:, 0, 0]
    array([5, 5, 5], dtype=uint8)
"""

from __future__ import annotations

import numpy as np


class FrameStack:
    """The last ``size`` frames of one episode, oldest first.

    Args:
        size: Frames per observation.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.frames: np.ndarray | None = None

    def reset(self) -> None:
        """Forgets the frames: the next one starts an episode."""
        self.frames = None

    def push(self, frame: np.ndarray) -> np.ndarray:
        """Adds the newest frame ``[H, W]``; returns the stack ``[size, H, W]`` (a copy)."""
        frame = np.asarray(frame)
        if self.frames is None or self.frames.shape[1:] != frame.shape:
            self.frames = np.repeat(frame[None], self.size, axis=0)
        else:
            self.frames = np.concatenate([self.frames[1:], frame[None]], axis=0)
        return self.frames.copy()
