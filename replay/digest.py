"""A digest of replay contents: one SHA-256 string that two runs compare (``run.deterministic``).

:class:`Digest` hashes named arrays and JSON values in a canonical form (name, dtype, shape,
bytes); :func:`table_digest` hashes what a table holds and would sample from: every stored
column up to its size, insertion ids, the write cursor and count, a frame-deduplicated table's
frames, and the sampler's state (priorities, the largest priority seen, a FIFO pass and its
position, the sampler's generator). Counters of reads (samples drawn, updates applied) are left
out: they describe traffic, not contents. Learners hash their state with the same class
(``learner.determinism.state_digest``).

Examples:
    >>> import numpy as np
    >>> a, b = Digest(), Digest()
    >>> a.add("x", np.arange(3)); b.add("x", np.arange(3))
    >>> a.hexdigest() == b.hexdigest()
    True
    >>> b.add("y", 1); a.hexdigest() == b.hexdigest()
    False
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np


class Digest:
    """SHA-256 over named arrays and JSON-able values, in the order they are added."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def add(self, name: str, value: Any) -> None:
        """Adds ``value`` (an array, or a JSON-able value) under ``name``."""
        if isinstance(value, np.ndarray):
            array = np.ascontiguousarray(value)
            header = f"{name}|{array.dtype.str}|{array.shape}|"
            self._hash.update(header.encode())
            self._hash.update(array.tobytes())
        else:
            text = json.dumps(value, sort_keys=True, default=_plain)
            self._hash.update(f"{name}|json|{text}|".encode())

    def hexdigest(self) -> str:
        """The digest so far, 64 hex characters."""
        return self._hash.hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot digest a {type(value).__name__}")


def table_digest(table) -> str:
    """The digest of a :class:`~replay.table.ReplayTable`'s contents (see the module docstring).

    Examples:
        >>> from replay.table import ReplayTable
        >>> tables = [ReplayTable(4, sampler="prioritized", seed=s) for s in (0, 0)]
        >>> for t in tables:
        ...     _ = t.write({"x": np.ones((2, 1), np.float32)}, "w", 0)
        >>> table_digest(tables[0]) == table_digest(tables[1])
        True
    """
    digest = Digest()
    storage, size = table.storage, len(table)
    columns = getattr(storage, "columns", None) or {}
    for key in sorted(columns):
        digest.add(f"column/{key}", columns[key][:size])
    digest.add("insertion_id", table.insertion_ids[:size])
    digest.add("counts", {"cursor": storage.cursor, "write_count": table.write_count})
    frames = getattr(storage, "frames", None)
    if frames is not None:
        filled = min(storage.frame_count, storage.frame_capacity)
        digest.add("frames", frames[:filled])
    arrays, meta = table.sampler.state(size)
    for name in sorted(arrays):
        digest.add(f"sampler/{name}", arrays[name])
    digest.add("sampler", meta)
    return digest.hexdigest()
