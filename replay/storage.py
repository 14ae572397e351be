"""Preallocated circular storage for transitions, in memory or memory-mapped on disk.

The storage holds ``capacity`` rows whose keys, shapes and dtypes are fixed by the first write,
which allocates every row up front; :attr:`CircularStorage.data` shows them as a
:class:`tensordict.TensorDict` sharing the same memory. Writes are whole
batches; the cursor wraps around and the oldest rows are overwritten. The hot paths (write,
gather) work on numpy views of the same memory: a write is at most two slice copies per key, a
gather one ``numpy.take`` per key.

With ``directory`` set, every column is a ``.npy`` file memory-mapped from that directory
(``column-<i>.npy``), so a table may be larger than RAM; the page cache holds the hot part.
"""

from __future__ import annotations

import math
import mmap
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tensordict import TensorDict

# Arrays or torch tensors. torch is imported only where a caller already uses it (a shard
# process never needs it, and starts faster without it).
Batch = Mapping[str, Any]
Schema = dict[str, tuple[tuple[int, ...], np.dtype]]


# Fault every page in at allocation (Linux): several times faster than first-touch faults one
# page at a time during the first pass of writes.
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def preallocate(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An array backed by anonymous memory whose pages are all faulted in up front."""
    count = math.prod(shape)
    nbytes = max(1, count * np.dtype(dtype).itemsize)
    buffer = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape)


class SchemaError(ValueError):
    """A batch whose keys, shapes or dtypes differ from the storage's schema."""


def as_array_batch(batch: Batch) -> dict[str, np.ndarray]:
    """Views a mapping of arrays or CPU tensors as numpy arrays, without copying.

    Raises:
        SchemaError: If the batch is empty, a value is neither array nor tensor, has no batch
            dimension, or the leading sizes differ.
    """
    if not batch:
        raise SchemaError("empty batch: a write needs at least one key")
    arrays = {}
    for key, value in batch.items():
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            try:
                value = value.detach().cpu().numpy()
            except TypeError as err:
                raise SchemaError(f"key {key!r}: dtype {value.dtype} has no numpy type") from err
        elif not isinstance(value, np.ndarray):
            raise SchemaError(f"key {key!r}: expected a numpy array or torch tensor")
        if value.ndim == 0:
            raise SchemaError(f"key {key!r}: expected a leading batch dimension")
        if value.dtype.hasobject:
            raise SchemaError(f"key {key!r}: object arrays cannot be stored")
        arrays[key] = value
    sizes = {v.shape[0] for v in arrays.values()}
    if len(sizes) != 1:
        raise SchemaError(f"leading sizes differ across keys: {sorted(sizes)}")
    return arrays


class CircularStorage:
    """A fixed-capacity ring buffer of transitions.

    Args:
        capacity: Number of rows.
        directory: Memory-map the columns from ``.npy`` files in this directory (created if
            missing); None keeps them in RAM.

    Examples:
        >>> storage = CircularStorage(capacity=4)
        >>> storage.write({"x": np.arange(3, dtype=np.float32)}).tolist()
        [0, 1, 2]
        >>> storage.write({"x": np.arange(3, dtype=np.float32)}).tolist()
        [3, 0, 1]
        >>> len(storage)
        4
    """

    def __init__(self, capacity: int, *, directory: str | Path | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.directory = None if directory is None else Path(directory)
        self.columns: dict[str, np.ndarray] = {}
        self.cursor = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    @property
    def schema(self) -> Schema | None:
        """Per-key ``(shape without batch dim, numpy dtype)``, or None before the first write."""
        if not self.columns:
            return None
        return {k: (tuple(v.shape[1:]), v.dtype) for k, v in self.columns.items()}

    @property
    def nbytes(self) -> int:
        """Bytes held by the filled rows."""
        return sum(v[: self.size].nbytes for v in self.columns.values())

    def allocate(self, schema: Schema) -> None:
        """Preallocates the columns (done by the first write, or by a checkpoint restore)."""
        columns = {}
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        for i, (key, (shape, dtype)) in enumerate(schema.items()):
            full = (self.capacity, *shape)
            if self.directory is None:
                columns[key] = preallocate(full, dtype)
            else:
                path = self.directory / f"column-{i}.npy"
                mapped = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=full)
                columns[key] = np.asarray(mapped)
        self.columns = columns

    @property
    def data(self) -> TensorDict | None:
        """The storage as a TensorDict of ``capacity`` rows sharing the columns' memory."""
        if not self.columns:
            return None
        import torch  # imported on use: see Batch
        from tensordict import TensorDict

        tensors = {k: torch.from_numpy(v) for k, v in self.columns.items()}
        return TensorDict(tensors, batch_size=[self.capacity])

    def check(self, arrays: dict[str, np.ndarray]) -> None:
        """Raises SchemaError if ``arrays`` do not match the fixed schema (no-op before)."""
        schema = self.schema
        if schema is None:
            return
        missing = sorted(set(schema) - set(arrays))
        extra = sorted(set(arrays) - set(schema))
        if missing:
            raise SchemaError(f"key {missing[0]!r}: missing from the batch")
        if extra:
            raise SchemaError(f"key {extra[0]!r}: not in the table's schema {sorted(schema)}")
        for key, (shape, dtype) in schema.items():
            value = arrays[key]
            if tuple(value.shape[1:]) != shape:
                raise SchemaError(
                    f"key {key!r}: shape {tuple(value.shape[1:])} differs from the table's {shape}"
                )
            if value.dtype != dtype:
                raise SchemaError(
                    f"key {key!r}: dtype {value.dtype} differs from the table's {dtype}"
                )

    def write(self, batch: Batch) -> np.ndarray:
        """Stores a batch and returns the slots it went to.

        A batch larger than the capacity keeps only its last ``capacity`` rows (the earlier ones
        would be overwritten by the same write anyway).

        Args:
            batch: Mapping from key to array, with a shared leading batch size.

        Returns:
            int64 array of the storage slots, in batch order (-1 for rows dropped by a batch
            larger than the capacity).

        Raises:
            SchemaError: If keys, shapes or dtypes differ from the first write's; nothing is stored.
        """
        arrays = as_array_batch(batch)
        self.check(arrays)
        if not self.columns:
            self.allocate({k: (tuple(v.shape[1:]), v.dtype) for k, v in arrays.items()})
        n = next(iter(arrays.values())).shape[0]
        kept = min(n, self.capacity)
        start = (self.cursor + n - kept) % self.capacity
        first = min(kept, self.capacity - start)
        for key, value in arrays.items():
            column, tail = self.columns[key], value[n - kept :]
            column[start : start + first] = tail[:first]
            column[: kept - first] = tail[first:]
        indices = (self.cursor + np.arange(n, dtype=np.int64)) % self.capacity
        indices[: n - kept] = -1
        self.cursor = int((self.cursor + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)
        return indices

    def gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Returns the rows at ``indices`` as a dict of numpy arrays (copies)."""
        if not self.columns:
            raise IndexError("the storage is empty")
        return {k: np.take(v, indices, axis=0) for k, v in self.columns.items()}

    def flush(self) -> None:
        """Writes memory-mapped columns back to their files (no-op in memory)."""
        for column in self.columns.values():
            base = column.base
            if isinstance(base, np.memmap):
                base.flush()
