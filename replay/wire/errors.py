"""The error every check of an external batch raises (``replay.wire.batches`` re-exports it)."""

from __future__ import annotations


class BatchError(ValueError):
    """A batch that does not match the run's transition spec; the message names the key."""
