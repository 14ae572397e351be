"""What the V-trace registrations share (not a registration: the walk skips ``_`` modules)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The asynchronous loop's settings every V-trace algorithm starts from.
ASYNC_DEFAULTS: Mapping[str, Any] = {
    "collector": {"n_step": 1, "max_inflight": 2},
    "replay": {"sampler": "fifo", "fifo_queue": True, "capacity": 4096, "num_shards": 1},
    "controller": {"init_random_frames": 0},
}
