"""Configuration of the replay service."""

from __future__ import annotations

import dataclasses

from replay.table import SAMPLERS


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """The sharded replay service.

    Attributes:
        capacity: Transitions held by the whole service (split evenly over shards).
        num_shards: ReplayShard actors.
        sampler: Sampling rule: ``uniform``.
        num_cpus: Logical Ray CPUs per shard (shards mostly wait, so a fraction).
    """

    capacity: int = 100_000
    num_shards: int = 2
    sampler: str = "uniform"
    num_cpus: float = 0.25

    def __post_init__(self) -> None:
        checks = [
            (self.num_shards >= 1, "num_shards", "must be >= 1", self.num_shards),
            (self.capacity >= self.num_shards, "capacity", "must be >= num_shards", self.capacity),
            (self.sampler in SAMPLERS, "sampler", f"must be one of {SAMPLERS}", self.sampler),
            (self.num_cpus >= 0, "num_cpus", "must be >= 0", self.num_cpus),
        ]
        for ok, field, rule, value in checks:
            if not ok:
                raise ValueError(f"{field}: {rule}, got {value!r}")

    @property
    def shard_capacity(self) -> int:
        """Capacity of one shard."""
        return self.capacity // self.num_shards
