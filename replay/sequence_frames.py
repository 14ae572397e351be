"""Sequence items that store each pixel frame once (``replay.frame_stack`` with sequences).

An R2D2 sequence item (``collector.sequence_worker``) holds ``observation [L + 1, S, H, W]``:
``L + 1`` stacks of ``S`` frames, each stack the previous one shifted by one new frame (a
sequence never crosses an episode boundary). Stored whole, every frame is held ``S`` times.
With ``replay.frame_stack: S`` the collectors store instead the sequence's unique frames::

    observation_frames [L + S, H, W]   the first stack's S frames, then the newest frame of
                                       each later stack (zeros after the last real one)

so the stack of observation ``t`` is ``observation_frames[t : t + S]`` for every real
observation (``t <= E``, ``E`` the sequence's real steps: ``valid.sum()``), and zeros after it,
as the sequence worker pads. An episode's first stack repeats its reset frame (as gymnasium's
``FrameStackObservation`` and ``collector.envs.images`` do); those repeats are the first
stack's frames, stored as they are, so a rebuilt stack equals the env's bit for bit. For
``L = 80``, ``S = 4`` an item's observations take 84 frames instead of 324.

The column is an ordinary fixed-shape item column: a shard stores, samples, checkpoints and
re-shards it like any other (unlike :mod:`replay.frames`, whose shared frame ring ties a
table's transitions together). The stacks are rebuilt learner-side (:func:`rebuild_stacks` in
``learner.core.LearnerCore.to_batch``), after the batch reached the learner's device, so the
object store and a GPU's copy carry the compact bytes.

Examples:
    >>> frames = np.arange(1, 6, dtype=np.uint8)[:, None, None]  # 5 single 1x1 frames
    >>> stacks = np.stack([frames[t : t + 2] for t in range(4)])[None]  # [1, L + 1 = 4, 2, ...]
    >>> valid = np.array([[True, True, False]])  # E = 2 real steps: o_0, o_1, o_2 real
    >>> stacks[0, 3] = 0  # the sequence worker zeroes observations after o_E
    >>> compact = encode_sequence_frames(stacks, valid)
    >>> compact.ravel().tolist()  # the first stack's 2 frames, then one per step, then zeros
    [1, 2, 3, 4, 0]
    >>> rebuilt = rebuild_stacks(torch.as_tensor(compact), torch.as_tensor(valid))
    >>> bool((rebuilt.numpy() == stacks).all())
    True
"""

from __future__ import annotations

import numpy as np
import torch

FRAMES_COLUMN = "observation_frames"

__all__ = ["FRAMES_COLUMN", "encode_sequence_frames", "rebuild_stacks"]


def encode_sequence_frames(observation: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The unique frames of sequence items' stacked observations (module docstring).

    Args:
        observation: ``[N, L + 1, S, ...]`` stacks, zeros after each item's last real one.
        valid: Bool ``[N, L]``: a prefix of True (the real steps ``E``) per item.

    Returns:
        ``[N, L + S, ...]``: each item's first stack, then each later stack's newest frame.

    Raises:
        ValueError: Naming ``replay.frame_stack`` if a real stack is not the previous one
            shifted by a frame (the env does not stack frames as ``FrameStackObservation``
            does), or if the padding is not zeros.
    """
    observation, valid = np.asarray(observation), np.asarray(valid, dtype=bool)
    count, length = valid.shape
    if observation.ndim < 3 or observation.shape[:2] != (count, length + 1):
        raise ValueError(
            f"replay.frame_stack: sequence observations must be [N, L + 1, S, ...] for valid "
            f"{list(valid.shape)}, got {list(observation.shape)}"
        )
    frames = np.concatenate([observation[:, 0], observation[:, 1:, -1]], axis=1)
    # Stack t + 1 must be stack t shifted by one frame wherever o_{t+1} is real; and a
    # rebuild writes zeros after o_E, so the item must hold zeros there.
    real_next = valid  # o_{t+1} is real where step t is
    shifted = observation[:, 1:, :-1] == observation[:, :-1, 1:]
    shifted = shifted.reshape(count, length, -1).all(-1)
    padding = observation[:, 1:].reshape(count, length, -1).any(-1) & ~real_next
    if (real_next & ~shifted).any() or padding.any():
        raise ValueError(
            "replay.frame_stack: a sequence's stacked observations are not one frame stack "
            "shifted by a frame per step (as gymnasium's FrameStackObservation stacks); set "
            "replay.frame_stack=0 to store whole observations"
        )
    return np.ascontiguousarray(frames)


def rebuild_stacks(frames: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[B, L + 1, S, ...]`` stacks from :func:`encode_sequence_frames`'s ``[B, L + S, ...]``.

    Runs on the tensors' device. ``S`` is ``frames.shape[1] - L`` (``L = valid.shape[1]``);
    observations after each item's last real one are zeros, as the sequence worker stores them.

    Raises:
        ValueError: If ``frames`` holds fewer than ``L + 1`` frames per item.
    """
    length = valid.shape[1]
    stack = frames.shape[1] - length
    if stack < 1:
        raise ValueError(
            f"replay.frame_stack: {FRAMES_COLUMN} holds {frames.shape[1]} frames per item, "
            f"fewer than the {length + 1} observations of a sequence of {length} steps"
        )
    device = frames.device
    index = torch.arange(length + 1, device=device)[:, None] + torch.arange(stack, device=device)
    stacks = frames[:, index]  # [B, L + 1, S, ...]
    real = valid.to(device=device, dtype=torch.bool).sum(1, keepdim=True)  # E per item
    after = torch.arange(length + 1, device=device)[None] > real  # o_t for t > E: padding
    stacks[after] = 0
    return stacks
