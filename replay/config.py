"""Configuration of the replay service."""

from __future__ import annotations

import dataclasses

from replay.table import SAMPLERS

STORAGES = ("memory", "mmap")


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """The sharded replay service.

    Attributes:
        capacity: Items held by the whole service (split evenly over shards): transitions, or
            sequences with ``sequence_length``.
        num_shards: ReplayShard actors.
        sampler: Sampling rule: ``uniform``, ``prioritized`` (proportional) or ``fifo``
            (on-policy: each item once per pass).
        num_cpus: Logical Ray CPUs per shard (shards mostly wait, so a fraction).
        alpha: Prioritization exponent: an item's mass is ``priority ** alpha``.
        beta_start: Importance-weight exponent at frame 0 (prioritized).
        beta_end: Importance-weight exponent once ``beta_anneal_frames`` are collected.
        beta_anneal_frames: Frames over which beta moves linearly from start to end (0: always
            ``beta_end``).
        fifo_shuffle: Hand out each FIFO pass in a random order instead of insertion order.
        fifo_queue: A FIFO table is a queue: each item is handed out once, oldest first (the
            asynchronous on-policy loop's learner queue; its registrations set it).
        storage: ``memory`` (preallocated in RAM) or ``mmap`` (memory-mapped ``.npy`` files under
            ``mmap_dir``, for replays larger than RAM).
        mmap_dir: Directory of the memory-mapped storage (required with ``storage: mmap``).
        max_restarts: Restarts Ray grants a dead shard (it comes back empty and the driver
            refills it from the latest checkpoint); one more death stops the run.
        health_interval_s: Seconds between the driver's health checks of the shards.
        restart_timeout_s: A shard down for longer stops the run.
        frame_stack: 0 stores observations as written; ``S >= 1`` stores each pixel frame once.
            Transitions: the shards keep a ring of single frames and rebuild ``S``-frame
            stacks at sample time (``replay.frames``; the collectors write frame streams).
            Sequences (``S >= 2``): each item holds its stacks' unique frames and the learner
            rebuilds the stacks (``replay.sequence_frames``). Set it to the env's frame stack,
            e.g. 4 for Atari.
        sequence_length: 0 stores transitions; ``L >= 2`` stores sequences of ``L`` steps of
            one env with the recurrent state before their first step (recurrent off-policy
            learning: recurrent DQN, R2D2; ``collector.sequence_worker``). A sequence never
            crosses an episode boundary: it ends with its episode, padded (``valid`` False) to
            ``L`` steps.
        sequence_overlap: Steps consecutive sequences of one episode share (``0 <= overlap <
            sequence_length``; R2D2: half the length).
        burn_in: The first steps of each sequence only advance the stored state, with no loss
            and no gradient (``0 <= burn_in < sequence_length``).
    """

    # Size and placement
    capacity: int = 100_000
    num_shards: int = 2
    num_cpus: float = 0.25
    # Sampling
    sampler: str = "uniform"
    alpha: float = 0.6
    beta_start: float = 0.4
    beta_end: float = 1.0
    beta_anneal_frames: int = 1_000_000
    fifo_shuffle: bool = False
    fifo_queue: bool = False
    # Storage
    storage: str = "memory"
    mmap_dir: str | None = None
    # Faults
    max_restarts: int = 5
    health_interval_s: float = 1.0
    restart_timeout_s: float = 60.0
    frame_stack: int = 0
    # Sequences (recurrent off-policy learning)
    sequence_length: int = 0
    sequence_overlap: int = 0
    burn_in: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.num_shards >= 1, "num_shards", "must be >= 1", self.num_shards),
            (self.capacity >= self.num_shards, "capacity", "must be >= num_shards", self.capacity),
            (self.sampler in SAMPLERS, "sampler", f"must be one of {SAMPLERS}", self.sampler),
            (self.num_cpus >= 0, "num_cpus", "must be >= 0", self.num_cpus),
            (self.alpha >= 0, "alpha", "must be >= 0", self.alpha),
            (0 <= self.beta_start <= 1, "beta_start", "must be in [0, 1]", self.beta_start),
            (0 <= self.beta_end <= 1, "beta_end", "must be in [0, 1]", self.beta_end),
            (
                self.beta_anneal_frames >= 0,
                "beta_anneal_frames",
                "must be >= 0",
                self.beta_anneal_frames,
            ),
            (self.max_restarts >= 0, "max_restarts", "must be >= 0", self.max_restarts),
            (
                self.health_interval_s > 0,
                "health_interval_s",
                "must be > 0",
                self.health_interval_s,
            ),
            (
                self.restart_timeout_s > 0,
                "restart_timeout_s",
                "must be > 0",
                self.restart_timeout_s,
            ),
            (self.storage in STORAGES, "storage", f"must be one of {STORAGES}", self.storage),
            (
                self.storage != "mmap" or bool(self.mmap_dir),
                "mmap_dir",
                "required when storage is 'mmap'",
                self.mmap_dir,
            ),
            (self.frame_stack >= 0, "frame_stack", "must be >= 0 (0: off)", self.frame_stack),
            (
                self.sequence_length == 0 or self.sequence_length >= 2,
                "sequence_length",
                "must be 0 (off) or >= 2",
                self.sequence_length,
            ),
            (
                0 <= self.sequence_overlap < max(self.sequence_length, 1),
                "sequence_overlap",
                f"must be in [0, sequence_length={self.sequence_length}) (0 without sequences)",
                self.sequence_overlap,
            ),
            (
                0 <= self.burn_in < max(self.sequence_length, 1),
                "burn_in",
                f"must be in [0, sequence_length={self.sequence_length}) (0 without sequences)",
                self.burn_in,
            ),
        ]
        for ok, field, rule, value in checks:
            if not ok:
                raise ValueError(f"{field}: {rule}, got {value!r}")

    @property
    def sequences(self) -> bool:
        """Whether replay stores sequences (``sequence_length > 0``)."""
        return self.sequence_length > 0

    @property
    def frame_ring(self) -> int:
        """The shards' frame ring (``replay.frames``): ``frame_stack`` for transitions, else 0.

        Sequence items carry their own frames (``replay.sequence_frames``): their shards store
        plain columns, which re-shard like any others.
        """
        return 0 if self.sequences else self.frame_stack

    @property
    def shard_capacity(self) -> int:
        """Capacity of one shard."""
        return self.capacity // self.num_shards

    def beta(self, frames: int) -> float:
        """The importance-weight exponent after ``frames`` collected frames (linear anneal).

        Examples:
            >>> ReplayConfig(beta_start=0.4, beta_end=1.0, beta_anneal_frames=100).beta(50)
            0.7
        """
        if self.beta_anneal_frames == 0 or frames >= self.beta_anneal_frames:
            return self.beta_end
        fraction = max(frames, 0) / self.beta_anneal_frames
        return self.beta_start + fraction * (self.beta_end - self.beta_start)
