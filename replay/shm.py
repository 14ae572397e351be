"""Large replay writes through shared memory, for a writer on the same node as its shard.

A write that travels as a Ray argument is copied into the object store by the writer and mapped
by the shard; for megabyte batches the object store's per-object work dominates (several times
the cost of this way for an Atari-sized batch; figures in ``docs/benchmarks.md``). Here the
writer copies the batch into a reusable block, a file in ``/dev/shm`` (memory, not disk), and
sends only the block's path and layout; the shard maps the block once and copies
the batch from it into its table (:meth:`replay.shard.ReplayShard.write_shared_many`). A block goes
back to the writer's pool when the write is acknowledged, so it is never rewritten while read.

Blocks are reserved with ``posix_fallocate`` (a full ``/dev/shm`` refuses the reservation up
front instead of failing a later page fault); when the pool is at its size limit or the
reservation fails, :meth:`SharedBlocks.put` returns None and the writer sends the batch the
ordinary way. :meth:`SharedBlocks.close` unlinks the files (a writer that dies leaves them in
``/dev/shm``, named ``relayrl-<pid>-...``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import mmap
import os
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path

import numpy as np

SHM_DIR = Path("/dev/shm")
BLOCK_ALIGN = 1 << 20  # block sizes are whole MiB, so a pool reuses blocks across batch sizes
# Layout of a batch in a block: key -> (numpy dtype string, shape, byte offset).
Layout = dict[str, tuple[str, tuple[int, ...], int]]


@dataclasses.dataclass
class Block:
    """One shared-memory file, mapped by the writer."""

    path: str
    size: int
    buffer: mmap.mmap


@dataclasses.dataclass(frozen=True)
class SharedBatch:
    """A batch placed in a block: what the shard needs to read it.

    Attributes:
        path: The block's file.
        layout: Key to ``(dtype, shape, offset)``.
        block: The writer's block (give it back with :meth:`SharedBlocks.release`).
    """

    path: str
    layout: Layout
    block: Block


class SharedBlocks:
    """The writer's pool of shared-memory blocks (thread-safe).

    Keyword Args:
        max_bytes: Total size of the blocks the pool may hold.
        directory: Where the files live (a tmpfs).

    Examples:
        >>> pool = SharedBlocks(max_bytes=8 << 20)
        >>> shared = pool.put({"x": np.arange(4, dtype=np.float32)})
        >>> view_batch(BlockViews(), shared.path, shared.layout)["x"].tolist()
        [0.0, 1.0, 2.0, 3.0]
        >>> pool.release(shared.block); pool.close()
    """

    def __init__(self, *, max_bytes: int = 256 << 20, directory: str | Path = SHM_DIR) -> None:
        self.max_bytes = max_bytes
        self.directory = Path(directory)
        self.free: list[Block] = []
        self.blocks: list[Block] = []
        self.lock = threading.Lock()
        self.prefix = f"relayrl-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    @property
    def nbytes(self) -> int:
        """Total size of the pool's blocks."""
        return sum(block.size for block in self.blocks)

    def _take(self, size: int) -> Block | None:
        with self.lock:
            fitting = [b for b in self.free if b.size >= size]
            if fitting:
                block = min(fitting, key=lambda b: b.size)
                self.free.remove(block)
                return block
            size = -(-size // BLOCK_ALIGN) * BLOCK_ALIGN
            if self.nbytes + size > self.max_bytes:
                return None
            path = self.directory / f"{self.prefix}-{len(self.blocks)}"
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except OSError:
                return None
            try:
                os.posix_fallocate(fd, 0, size)
                block = Block(str(path), size, mmap.mmap(fd, size))
            except OSError:
                path.unlink(missing_ok=True)
                return None
            finally:
                os.close(fd)
            self.blocks.append(block)
            return block

    def put(self, arrays: Mapping[str, np.ndarray]) -> SharedBatch | None:
        """Copies ``arrays`` into a free block; None when the pool cannot hold them."""
        layout: Layout = {}
        offset = 0
        for key, array in arrays.items():
            offset = -(-offset // 64) * 64  # aligned rows for the reader's copies
            layout[key] = (array.dtype.str, tuple(array.shape), offset)
            offset += array.nbytes
        block = self._take(max(offset, 1))
        if block is None:
            return None
        for key, array in arrays.items():
            dtype, shape, start = layout[key]
            np.ndarray(shape, dtype, buffer=block.buffer, offset=start)[...] = array
        return SharedBatch(block.path, layout, block)

    def release(self, block: Block) -> None:
        """Returns a block once its write is acknowledged (or failed)."""
        with self.lock:
            if block in self.blocks and block not in self.free:
                self.free.append(block)

    def close(self) -> None:
        """Unmaps and unlinks every block."""
        with self.lock:
            for block in self.blocks:
                Path(block.path).unlink(missing_ok=True)
                with contextlib.suppress(BufferError):  # a view still alive keeps it mapped
                    block.buffer.close()
            self.blocks, self.free = [], []


class BlockViews:
    """The reader's mappings of blocks, most recent ``limit`` kept open.

    Args:
        limit: Mappings kept; older ones are closed (a writer's pool reuses few blocks).
    """

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self.maps: collections.OrderedDict[str, mmap.mmap] = collections.OrderedDict()

    def mapping(self, path: str) -> mmap.mmap:
        """The (cached) read-only mapping of ``path``."""
        mapped = self.maps.get(path)
        if mapped is None:
            with open(path, "rb") as file:
                mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            self.maps[path] = mapped
            while len(self.maps) > self.limit:
                _, old = self.maps.popitem(last=False)
                with contextlib.suppress(BufferError):
                    old.close()
        else:
            self.maps.move_to_end(path)
        return mapped


def view_batch(views: BlockViews, path: str, layout: Layout) -> dict[str, np.ndarray]:
    """Read-only arrays over a block (valid until the writer reuses it: copy what you keep)."""
    mapped = views.mapping(path)
    return {
        key: np.ndarray(tuple(shape), np.dtype(dtype), buffer=mapped, offset=offset)
        for key, (dtype, shape, offset) in layout.items()
    }
