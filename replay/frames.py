"""Replay that stores each frame once: single uint8 frames, stacks rebuilt at sample time.

A stacked pixel observation ``[S, H, W]`` shares ``S - 1`` frames with the previous step's, and
``next_observation`` repeats them once more, so storing stacks stores every frame ``2 S`` times.
As in DQN Zoo and Dopamine, this storage keeps a ring of single frames and, per transition, the
position of the newest frame of its observation and of its next observation; a stack is the
``S`` consecutive frames ending there.

**The frame-stream write format.** A collector that writes to such a table (``replay.
frame_stack: S``) sends, instead of ``observation`` and ``next_observation``:

* ``frames``: ``[F, H, W]`` uint8, this write's frames (``F`` is not the transition count);
* ``obs_frame``, ``next_obs_frame``: int64 ``[N]``, the position in ``frames`` of the newest
  frame of each transition's observation and next observation;

with the invariant that the stack of a position ``p`` is ``frames[p - S + 1 : p + 1]``.
:func:`encode_stacks` builds it from stacked observations: per env it emits the whole stack of
the first row, then only the newest frame of each row whose stack is the previous one shifted
by a frame, and the whole stack again where it is not (an episode's first observation), so a
rebuilt stack equals the env's stack by construction. A write is self-contained: it refers to
no frame of an earlier write. On the wire this is about ``1 + (S - 1 + n) / steps_per_env``
frames per transition instead of ``2 S``.

**A ``Dict`` observation's image key.** A write may name the observation key its frames belong
to in its position columns: ``obs_frame.<key>`` and ``next_obs_frame.<key>``
(:func:`position_keys`); its stacks are then rebuilt as the columns ``observation.<key>`` and
``next_observation.<key>``, beside the other keys' columns, which are stored as written (the
positions' names are stored columns, so checkpoints keep the key). A stack ``[S, C, H, W]`` of
``C``-channel frames is returned as ``[S * C, H, W]``.

The frame ring holds ``capacity * (1 + FRAME_SLACK)`` frames (at least one write's). Frames and
transitions are both first-in first-out; a transition whose oldest frame has been overwritten
(possible when writes carry more frames per transition than the slack allows) is *dead*:
:meth:`FrameStackStorage.live` says so and the table draws again instead of returning it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from replay.storage import Batch, CircularStorage, SchemaError, as_array_batch, preallocate

# Frames held beyond one per transition: a collector with rollouts of ``T`` steps per env and
# ``n``-step windows writes about ``(S - 1 + n) / T`` extra frames per transition (6 % at
# T = 128, S = 4, n = 3).
FRAME_SLACK = 0.125
FRAME_KEYS = ("frames", "obs_frame", "next_obs_frame")


def position_keys(key: str = "") -> tuple[str, str]:
    """The position columns of a frame stream for observation ``key`` (``""``: a plain one).

    Examples:
        >>> position_keys(), position_keys("camera")
        (('obs_frame', 'next_obs_frame'), ('obs_frame.camera', 'next_obs_frame.camera'))
    """
    suffix = f".{key}" if key else ""
    return f"obs_frame{suffix}", f"next_obs_frame{suffix}"


def _stream_key(batch) -> str:
    """The observation key a frame-stream write's positions name (``""``: a plain one)."""
    for name in batch:
        if name.startswith("obs_frame."):
            return name[len("obs_frame.") :]
    return ""


def frame_capacity_for(capacity: int) -> int:
    """Frames held by a frame-deduplicated table of ``capacity`` transitions."""
    return capacity + int(capacity * FRAME_SLACK) + 1


def encode_stacks(
    stacks: np.ndarray, obs_rows: np.ndarray, next_rows: np.ndarray, envs: np.ndarray
) -> dict[str, np.ndarray]:
    """Encodes stacked observations as one write's frame stream (see the module docstring).

    Args:
        stacks: ``[R, num_envs, S, H, W]`` stacked observations, row-major in time.
        obs_rows: Row of each transition's observation.
        next_rows: Row of each transition's next observation (same env, later or equal row).
        envs: Env of each transition.

    Returns:
        ``{"frames", "obs_frame", "next_obs_frame"}``.

    Examples:
        >>> stacks = np.arange(6, dtype=np.uint8)[:, None, None, None, None]  # 6 rows, 1 env
        >>> stacks = np.lib.stride_tricks.sliding_window_view(stacks[:, :, 0], 2, axis=0)
        >>> stacks = np.ascontiguousarray(stacks.transpose(0, 1, 4, 2, 3))  # [5, 1, 2, 1, 1]
        >>> out = encode_stacks(stacks, np.array([0, 1]), np.array([2, 3]), np.array([0, 0]))
        >>> out["frames"].ravel().tolist()
        [0, 1, 2, 3, 4]
        >>> out["obs_frame"].tolist(), out["next_obs_frame"].tolist()
        ([1, 2], [3, 4])
    """
    size = stacks.shape[2]
    obs_frame = np.empty(len(obs_rows), dtype=np.int64)
    next_frame = np.empty(len(obs_rows), dtype=np.int64)
    row_parts, slot_parts, env_parts = [], [], []
    base = 0
    for env in np.unique(envs):
        mine = envs == env
        first, last = int(obs_rows[mine].min()), int(next_rows[mine].max())
        block = stacks[first : last + 1, env]
        rows = len(block)
        shifted = np.ones(rows, dtype=bool)
        shifted[0] = False
        if rows > 1:
            same = block[1:, :-1].reshape(rows - 1, -1) == block[:-1, 1:].reshape(rows - 1, -1)
            shifted[1:] = same.all(axis=1)
        counts = np.where(shifted, 1, size)
        ends = base + np.cumsum(counts) - 1  # position of each row's newest frame
        obs_frame[mine] = ends[obs_rows[mine] - first]
        next_frame[mine] = ends[next_rows[mine] - first]
        row_index = np.repeat(np.arange(rows), counts)
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        slot = np.arange(len(row_index)) - starts + np.repeat(size - counts, counts)
        row_parts.append(row_index + first)
        slot_parts.append(slot)
        env_parts.append(np.full(len(row_index), env))
        base += int(counts.sum())
    if row_parts:
        rows_all, slots, env_all = map(np.concatenate, (row_parts, slot_parts, env_parts))
        frames = stacks[rows_all, env_all, slots]
    else:
        frames = np.empty((0, *stacks.shape[3:]), dtype=stacks.dtype)
    return {"frames": frames, "obs_frame": obs_frame, "next_obs_frame": next_frame}


class FrameStackStorage(CircularStorage):
    """A ring of transitions whose observations are rebuilt from a ring of single frames.

    Its columns hold the transitions' other keys plus ``obs_frame`` and ``next_obs_frame``
    (absolute frame ids: frame ``k`` of the storage's history lives in frame slot
    ``k % frame_capacity``). :meth:`gather` returns ``observation`` and ``next_observation``
    as ``[B, S, H, W]`` stacks instead of the ids.

    Args:
        capacity: Transitions held.
        stack: Frames per observation ``S``.
        directory: Memory-map the columns and the frame ring (``frames.npy``) from here.

    Examples:
        >>> storage = FrameStackStorage(4, stack=2)
        >>> batch = {"frames": np.arange(4, dtype=np.uint8).reshape(4, 1, 1),
        ...          "obs_frame": np.array([1, 2]), "next_obs_frame": np.array([2, 3]),
        ...          "reward": np.zeros(2, np.float32)}
        >>> storage.write(batch).tolist()
        [0, 1]
        >>> storage.gather(np.array([1]))["next_observation"].ravel().tolist()
        [2, 3]
    """

    def __init__(
        self, capacity: int, *, stack: int = 4, directory: str | Path | None = None
    ) -> None:
        super().__init__(capacity, directory=directory)
        if stack < 1:
            raise ValueError(f"frame_stack: must be >= 1, got {stack}")
        self.stack = stack
        self.frame_capacity = frame_capacity_for(capacity)
        self.frames: np.ndarray | None = None
        self.frame_count = 0
        self.key: str | None = None  # the observation key of the positions, once known

    @property
    def nbytes(self) -> int:
        """Bytes held by the filled transition rows and the filled part of the frame ring."""
        if self.frames is None:
            return 0
        filled = min(self.frame_count, self.frame_capacity)
        return super().nbytes + self.frames[:filled].nbytes

    def allocate_frames(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        """Preallocates the frame ring (done by the first write, or by a checkpoint restore)."""
        full = (self.frame_capacity, *shape)
        if self.directory is None:
            self.frames = preallocate(full, dtype)
        else:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / "frames.npy"
            self.frames = np.asarray(
                np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=full)
            )

    def write(self, batch: Batch) -> np.ndarray:
        """Stores one frame-stream write (see the module docstring); returns transition slots.

        Raises:
            SchemaError: If a frame key is missing, a position is outside the write's frames,
                the write holds more frames than the ring, or the frames' shape differs.
        """
        batch = dict(batch)
        stream_key = _stream_key(batch)  # another key than the table's: refused by the schema
        for key in ("frames", *position_keys(stream_key)):
            if key not in batch:
                raise SchemaError(f"key {key!r}: missing from a frame-stream write")
        frames = as_array_batch({"frames": batch.pop("frames")})["frames"]
        arrays = as_array_batch(batch)
        count = len(frames)
        if count > self.frame_capacity:
            raise SchemaError(
                f"key 'frames': a write of {count} frames exceeds the ring of "
                f"{self.frame_capacity}; write smaller rollouts"
            )
        if self.frames is not None and (
            frames.shape[1:] != self.frames.shape[1:] or frames.dtype != self.frames.dtype
        ):
            raise SchemaError(
                f"key 'frames': {frames.dtype}{list(frames.shape[1:])} differs from the "
                f"table's {self.frames.dtype}{list(self.frames.shape[1:])}"
            )
        for key in position_keys(stream_key):
            positions = arrays[key]
            if len(positions) and (positions.min() < self.stack - 1 or positions.max() >= count):
                raise SchemaError(f"key {key!r}: positions must be in [{self.stack - 1}, {count})")
            arrays[key] = positions.astype(np.int64) + self.frame_count
        self.check(arrays)
        if self.frames is None:
            self.allocate_frames(frames.shape[1:], frames.dtype)
        start = self.frame_count % self.frame_capacity
        first = min(count, self.frame_capacity - start)
        self.frames[start : start + first] = frames[:first]
        self.frames[: count - first] = frames[first:]
        self.frame_count += count
        self.key = stream_key
        return super().write(arrays)

    def _positions(self) -> tuple[str, str]:
        if self.key is None:  # restored from a checkpoint: the stored columns name the key
            self.key = _stream_key(self.columns)
        return position_keys(self.key)

    def live(self, indices: np.ndarray) -> np.ndarray:
        """Whether each slot's stacks are still whole (no frame of it overwritten)."""
        oldest = self.columns[self._positions()[0]][indices] - (self.stack - 1)
        return oldest >= self.frame_count - self.frame_capacity

    def stacks(self, newest: np.ndarray) -> np.ndarray:
        """``[B, S, H, W]`` stacks ending at the absolute frame ids ``newest``.

        ``C``-channel frames ``[C, H, W]`` give ``[B, S * C, H, W]``.
        """
        ids = newest[:, None] + np.arange(1 - self.stack, 1)
        stacks = np.take(self.frames, ids % self.frame_capacity, axis=0)
        if stacks.ndim == 5:
            stacks = stacks.reshape(len(newest), -1, *stacks.shape[3:])
        return stacks

    def gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The rows at ``indices`` with stacked ``observation`` and ``next_observation``.

        For a ``Dict`` observation's image key: ``observation.<key>`` and its next twin.
        """
        rows = super().gather(indices)
        obs_key, next_key = self._positions()
        name = f"observation.{self.key}" if self.key else "observation"
        rows[name] = self.stacks(rows.pop(obs_key))
        rows["next_" + name] = self.stacks(rows.pop(next_key))
        return rows

    def flush(self) -> None:
        """Writes memory-mapped columns and frames back to their files (no-op in memory)."""
        super().flush()
        base = None if self.frames is None else self.frames.base
        if isinstance(base, np.memmap):
            base.flush()
