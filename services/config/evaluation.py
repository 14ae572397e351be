"""The ``evaluation`` section of the run config (the schedule is ``services.evaluation``)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    """Greedy evaluation by an evaluator actor, off unless ``interval_frames > 0``.

    Attributes:
        interval_frames: Collected frames between evaluations (0: no evaluation).
        episodes: Episodes per evaluation.
        num_envs: Environments the evaluator steps side by side.
        env_id: Evaluation env (a gymnasium id or ``module:function``); None: the training env
            (``collector.env_id`` with ``collector.env_kwargs``).
        env_kwargs: Keyword arguments of ``env_id`` (ignored when ``env_id`` is None).
        run_at_start: Also evaluate version 0 right after setup.
        run_at_end: Evaluate the final version unless the last evaluation already used it.
        wait_at_end: Wait for the end evaluation (and one in flight) before the final
            checkpoint and summary.
        timeout_s: Longest wait at the end.
        num_cpus: Logical CPUs the evaluator actor asks for.
        stop_return: Stop the run once an evaluation's mean return reaches this (None: never).
    """

    # Schedule
    interval_frames: int = 0
    episodes: int = 10
    run_at_start: bool = False
    run_at_end: bool = True
    wait_at_end: bool = True
    timeout_s: float = 120.0
    stop_return: float | None = None
    # The evaluator's envs and resources
    num_envs: int = 2
    env_id: str | None = None
    env_kwargs: dict = dataclasses.field(default_factory=dict)
    num_cpus: float = 0.25

    def __post_init__(self) -> None:
        checks = [
            (self.interval_frames >= 0, "interval_frames", "must be >= 0", self.interval_frames),
            (self.episodes >= 1, "episodes", "must be >= 1", self.episodes),
            (self.num_envs >= 1, "num_envs", "must be >= 1", self.num_envs),
            (self.timeout_s > 0, "timeout_s", "must be > 0", self.timeout_s),
            (self.num_cpus > 0, "num_cpus", "must be > 0", self.num_cpus),
            (self.env_id is None or bool(self.env_id), "env_id", "must be non-empty", self.env_id),
        ]
        for ok, field, rule, value in checks:
            if not ok:
                raise ValueError(f"{field}: {rule}, got {value!r}")

    @property
    def enabled(self) -> bool:
        """Whether the run starts an evaluator."""
        return self.interval_frames > 0
