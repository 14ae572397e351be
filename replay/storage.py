"""Preallocated circular storage for transitions.

The storage is a :class:`tensordict.TensorDict` of ``capacity`` rows whose keys, shapes and
dtypes are fixed by the first write. Writes are whole batches; the cursor wraps around and the
oldest rows are overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from tensordict import TensorDict

Batch = Mapping[str, np.ndarray | torch.Tensor]


class SchemaError(ValueError):
    """A batch whose keys, shapes or dtypes differ from the storage's schema."""


def as_tensor_batch(batch: Batch) -> dict[str, torch.Tensor]:
    """Converts a mapping of arrays or tensors to tensors without copying where possible.

    Args:
        batch: Mapping from key to a numpy array or a torch tensor, all with the same leading size.

    Returns:
        A dict of torch tensors.

    Raises:
        SchemaError: If the batch is empty or its leading sizes differ.
    """
    if not batch:
        raise SchemaError("empty batch: a write needs at least one key")
    tensors = {}
    for key, value in batch.items():
        if isinstance(value, np.ndarray):
            if not value.flags.writeable:
                value = value.copy()
            value = torch.from_numpy(value)
        elif not isinstance(value, torch.Tensor):
            raise SchemaError(f"key {key!r}: expected a numpy array or torch tensor")
        if value.ndim == 0:
            raise SchemaError(f"key {key!r}: expected a leading batch dimension")
        tensors[key] = value
    sizes = {v.shape[0] for v in tensors.values()}
    if len(sizes) != 1:
        raise SchemaError(f"leading sizes differ across keys: {sorted(sizes)}")
    return tensors


class CircularStorage:
    """A fixed-capacity ring buffer of transitions.

    Examples:
        >>> storage = CircularStorage(capacity=4)
        >>> storage.write({"x": np.arange(3, dtype=np.float32)}).tolist()
        [0, 1, 2]
        >>> storage.write({"x": np.arange(3, dtype=np.float32)}).tolist()
        [3, 0, 1]
        >>> len(storage)
        4
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.data: TensorDict | None = None
        self.cursor = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    @property
    def schema(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]] | None:
        """Per-key ``(shape without batch dim, dtype)``, or None before the first write."""
        if self.data is None:
            return None
        return {k: (tuple(v.shape[1:]), v.dtype) for k, v in self.data.items()}

    def _allocate(self, tensors: dict[str, torch.Tensor]) -> None:
        source = {
            k: torch.empty((self.capacity, *v.shape[1:]), dtype=v.dtype) for k, v in tensors.items()
        }
        self.data = TensorDict(source, batch_size=[self.capacity])

    def check(self, tensors: dict[str, torch.Tensor]) -> None:
        """Raises SchemaError if ``tensors`` do not match the fixed schema (no-op before)."""
        schema = self.schema
        if schema is None:
            return
        missing = sorted(set(schema) - set(tensors))
        extra = sorted(set(tensors) - set(schema))
        if missing:
            raise SchemaError(f"key {missing[0]!r}: missing from the batch")
        if extra:
            raise SchemaError(f"key {extra[0]!r}: not in the table's schema {sorted(schema)}")
        for key, (shape, dtype) in schema.items():
            value = tensors[key]
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
        tensors = as_tensor_batch(batch)
        self.check(tensors)
        if self.data is None:
            self._allocate(tensors)
        n = next(iter(tensors.values())).shape[0]
        indices = (self.cursor + np.arange(n, dtype=np.int64)) % self.capacity
        keep = slice(max(0, n - self.capacity), n)
        index = torch.from_numpy(indices[keep])
        for key, value in tensors.items():
            self.data[key][index] = value[keep]
        self.cursor = int((self.cursor + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)
        if n > self.capacity:
            indices[: n - self.capacity] = -1
        return indices

    def gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Returns the rows at ``indices`` as a dict of numpy arrays (copies)."""
        if self.data is None:
            raise IndexError("the storage is empty")
        index = torch.from_numpy(np.asarray(indices, dtype=np.int64))
        return {k: v[index].numpy() for k, v in self.data.items()}
