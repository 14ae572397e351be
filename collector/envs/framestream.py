"""Frame-stream transitions for frame-deduplicated replay (``replay.frames``), no Ray.

:class:`FrameStreamBuffer` wraps :class:`collector.nstep.NStepBuffer`: the n-step windows are
built over row ids instead of observations (the buffer only indexes its observations), then the
observations the completed windows refer to are encoded with :func:`replay.frames.encode_stacks`.
Rows of windows still open are kept for the next rollout, whose write then repeats the few
frames they need (every write is self-contained).

A ``Dict`` observation (one column per key, ``observation.<key>``) sends one stacked image key
as the frame stream (``collector.image_keys`` with its ``frame_stack``): its positions travel as
``obs_frame.<key>`` and ``next_obs_frame.<key>`` (:func:`replay.frames.position_keys`), the
other keys as their usual columns.
"""

from __future__ import annotations

import numpy as np

from collector.nstep import NStepBuffer
from replay.frames import encode_stacks, position_keys


class FrameStreamBuffer:
    """N-step transitions whose observations travel as a frame stream.

    Args:
        nstep: The n-step window builder (its ``n`` and ``gamma`` apply).
        num_envs: Sub-envs of the vector env.
        key: The stacked image key of a ``Dict`` observation (``""``: a plain observation).
        stack: Frames per stack ``S`` (a key's ``[S * C, H, W]`` is sent as ``C``-channel frames).

    Examples:
        >>> buffer = FrameStreamBuffer(NStepBuffer(n=1), num_envs=1)
        >>> stacks = np.zeros((3, 1, 4, 2, 2), np.uint8)  # 2 steps of 4-frame 2x2 stacks
        >>> steps = {"action": np.zeros((2, 1), np.int64), "reward": np.ones((2, 1), np.float32),
        ...          "terminated": np.zeros((2, 1), bool), "truncated": np.zeros((2, 1), bool),
        ...          "valid": np.ones((2, 1), bool), "policy_version": np.zeros((2, 1), np.int64)}
        >>> out = buffer.add(steps, stacks)
        >>> out["frames"].shape, out["obs_frame"].tolist(), out["next_obs_frame"].tolist()
        ((6, 2, 2), [3, 4], [4, 5])
    """

    def __init__(self, nstep: NStepBuffer, num_envs: int, key: str = "", stack: int = 0) -> None:
        self.nstep = nstep
        self.num_envs = num_envs
        self.key, self.stack = key, stack
        self.column = f"observation.{key}" if key else "observation"
        self.next_row = 0
        self.cache: np.ndarray | None = None
        self.cache_start = 0

    def __len__(self) -> int:
        """Vector steps whose windows are still open."""
        return len(self.nstep)

    def clear(self) -> None:
        """Drops open windows and their rows."""
        self.nstep.clear()
        self.cache = None

    def add(self, steps: dict[str, np.ndarray], obs) -> dict[str, np.ndarray]:
        """Like :meth:`NStepBuffer.add`, with ``frames``, ``obs_frame``, ``next_obs_frame``.

        Args:
            steps: Time-major step arrays ``[T, num_envs]`` (see ``collector.nstep``).
            obs: Stacked observations ``[T + 1, num_envs, S, H, W]``, or (with ``key``) the
                mapping of observation columns holding them under ``observation.<key>``.
        """
        rest = {}
        if isinstance(obs, dict):
            rest = {k: v for k, v in obs.items() if k != self.column}
            obs = obs[self.column]
        if self.stack and obs.shape[2] != self.stack:  # [S * C, H, W]: C-channel frames
            obs = obs.reshape(*obs.shape[:2], self.stack, -1, *obs.shape[3:])
        n, length = self.num_envs, len(steps["reward"])
        first = self.next_row
        if self.cache is not None and len(self.nstep):
            rows = np.concatenate([self.cache[: first - self.cache_start], obs])
            start = self.cache_start
        else:
            rows, start = obs, first
        ids = (first + np.arange(length + 1))[:, None] * n + np.arange(n)
        out = self.nstep.add(steps, {self.column: ids, **rest} if self.key else ids)
        obs_id, next_id = out.pop(self.column), out.pop("next_" + self.column)
        stream = encode_stacks(rows, obs_id // n - start, next_id // n - start, obs_id % n)
        obs_key, next_key = position_keys(self.key)
        stream[obs_key], stream[next_key] = stream.pop("obs_frame"), stream.pop("next_obs_frame")
        out.update(stream)
        self.next_row = first + length
        open_from = self.next_row - len(self.nstep)
        self.cache = rows[open_from - start :].copy()
        self.cache_start = open_from
        return out
