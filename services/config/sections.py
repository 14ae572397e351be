"""The run configuration's sections: component dataclasses composed into one :class:`RunConfig`.

Every section is a frozen dataclass validated on construction; a section raises ``ValueError``
naming its field (``world_size: must be ...``), and the loader (``services.config.loader``)
prefixes the section (``learner.world_size: ...``) and raises :class:`ConfigError`.
:class:`RunConfig` also checks what spans sections and the algorithm's combinations
(``services.config.checks``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from collector.config import CollectorConfig
from learner.config import LearnerConfig
from replay.config import ReplayConfig
from services.config.checks import check
from services.config.determinism import check_deterministic
from services.config.evaluation import EvaluationConfig
from services.config.grpc import GrpcConfig, redact_secrets
from services.config.recipes import ALGORITHMS, DEFAULT
from services.config.trackers import MlflowSection, WandbSection, check_trackers


class ConfigError(ValueError):
    """An invalid configuration; the message names the field and what is accepted."""


@dataclasses.dataclass(frozen=True)
class RunSection:
    """Run identity and output location.

    Attributes:
        name: Run name, the human part of the run id ``<name>-<YYYYmmdd-HHMMSS>-<token>``
            that names the run's actors (``<run id>.collector-0``), directory and metrics.
        dir: Run directory; default ``<storage>/<run id>``.
        storage: Root of the default run directories; None: ``$RELAYRL_STORAGE``, else
            ``~/relayrl_results`` (``services.run.storage``). Never inside a submitted job's
            working directory, which Ray deletes.
        deterministic: Same seed and config, same bits: the loops schedule by counts instead
            of arrival, every random stream derives from ``(seed, component, index,
            generation)`` and the learners run deterministic kernels (``docs/determinism.md``).
            Off by default: it costs speed.
        policy_lag: Deterministic off-policy runs only: a collection round acts with the
            weights published this many learner rounds earlier (1: the previous round's), so
            collection and learning overlap; on-policy runs are lockstep (lag 0) regardless.
    """

    name: str = "relayrl"
    dir: str | None = None
    storage: str | None = None
    # Determinism
    deterministic: bool = False
    policy_lag: int = 2

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "/ \t\n"):
            raise ValueError(f"name: must be non-empty without '/' or spaces, got {self.name!r}")
        if self.storage is not None and not self.storage:
            raise ValueError(f"storage: must be a non-empty path, got {self.storage!r}")
        if not isinstance(self.deterministic, bool):
            raise ValueError(f"deterministic: must be true or false, got {self.deterministic!r}")
        if isinstance(self.policy_lag, bool) or not isinstance(self.policy_lag, int):
            raise ValueError(f"policy_lag: must be an integer >= 1, got {self.policy_lag!r}")
        if self.policy_lag < 1:
            raise ValueError(f"policy_lag: must be >= 1, got {self.policy_lag!r}")


@dataclasses.dataclass(frozen=True)
class ControllerConfig:
    """The driver's frame-accounting loop.

    Attributes:
        total_frames: Frames to collect (counted from rollout receipts, times ``frame_skip``).
        init_random_frames: Frames collected with uniform random actions before learning.
        utd_ratio: Optimizer steps per collected frame (update-to-data ratio).
        max_steps_per_round: Optimizer steps in one learner round at most.
        max_lag_steps: Collection pauses while learners trail their UTD target by more steps.
        log_interval_s: Seconds between progress lines.
        episode_window: Episodes in the running mean of returns.
        return_milestones: Returns whose first crossing by the running mean is reported in the
            summary (frames and seconds), e.g. CartPole's 475.
        stop_return: Stop early once the running mean reaches this return (None: never).
        early_stop_metric: Stop when this logged metric stops improving (None: off), e.g.
            ``episode_return_mean`` or ``learner.loss_q``; NaN or infinite values stop at once.
        early_stop_mode: ``max`` or ``min``: which direction is an improvement.
        early_stop_patience_frames: Frames without improvement before stopping.
        early_stop_min_delta: Smallest change that counts as an improvement.
    """

    total_frames: int = 80_000
    init_random_frames: int = 1_000
    utd_ratio: float = 0.5
    max_steps_per_round: int = 64
    max_lag_steps: int = 256
    log_interval_s: float = 5.0
    episode_window: int = 20
    return_milestones: tuple[float, ...] = (150.0, 475.0)
    stop_return: float | None = None
    early_stop_metric: str | None = None
    early_stop_mode: str = "max"
    early_stop_patience_frames: int = 50_000
    early_stop_min_delta: float = 0.0

    def __post_init__(self) -> None:
        checks = [
            (self.total_frames >= 1, "total_frames", "must be >= 1", self.total_frames),
            (
                self.init_random_frames >= 0,
                "init_random_frames",
                "must be >= 0",
                self.init_random_frames,
            ),
            (self.utd_ratio >= 0, "utd_ratio", "must be >= 0", self.utd_ratio),
            (
                self.max_steps_per_round >= 1,
                "max_steps_per_round",
                "must be >= 1",
                self.max_steps_per_round,
            ),
            (self.max_lag_steps >= 1, "max_lag_steps", "must be >= 1", self.max_lag_steps),
            (self.log_interval_s > 0, "log_interval_s", "must be > 0", self.log_interval_s),
            (self.episode_window >= 1, "episode_window", "must be >= 1", self.episode_window),
            (
                self.early_stop_mode in ("max", "min"),
                "early_stop_mode",
                "must be one of ('max', 'min')",
                self.early_stop_mode,
            ),
            (
                self.early_stop_patience_frames >= 0,
                "early_stop_patience_frames",
                "must be >= 0",
                self.early_stop_patience_frames,
            ),
        ]
        for ok, field, rule, value in checks:
            if not ok:
                raise ValueError(f"{field}: {rule}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """Checkpoints.

    Periodic checkpoints are on by default, so a run always has something to restore a dead
    learner rank or a restarted replay shard from: every quarter of the frame budget and every
    ten minutes, whichever comes first.

    Attributes:
        dir: Rotation directory; default ``<run dir>/checkpoints``.
        interval_frames: Frames between checkpoints (None: a quarter of
            ``controller.total_frames``; 0: none by frames).
        interval_s: Wall seconds between checkpoints (0: none by time).
        keep: Newest checkpoints kept by rotation.
        at_end: Write a checkpoint when the run reaches ``total_frames``.
        keep_best: Also keep this many best checkpoints by ``best_metric`` (0: off;
            ``services.checkpoints.retention``).
        best_metric: The metric ranking checkpoints, e.g. ``evaluation/episode_return_mean``.
        best_mode: ``max`` or ``min``: which direction is better.
        signing_key: Sign every checkpoint with this HMAC key, ``env:NAME`` or ``file:PATH``
            (never the key itself); None: the ``RELAYRL_CHECKPOINT_KEY`` environment variable
            if set, else unsigned. Loading with the same key trusts what a signed checkpoint
            names and refuses one whose signature is wrong (``services.checkpoints.trust``).
    """

    dir: str | None = None
    interval_frames: int | None = None
    interval_s: float = 600.0
    keep: int = 3
    at_end: bool = True
    keep_best: int = 0
    best_metric: str = "evaluation/episode_return_mean"
    best_mode: str = "max"
    signing_key: str | None = None

    def __post_init__(self) -> None:
        if self.signing_key is not None and not self.signing_key.startswith(("env:", "file:")):
            raise ValueError("signing_key: give env:NAME or file:PATH, never the key itself")
        if self.interval_frames is not None and self.interval_frames < 0:
            raise ValueError(f"interval_frames: must be >= 0, got {self.interval_frames!r}")
        if self.interval_s < 0:
            raise ValueError(f"interval_s: must be >= 0, got {self.interval_s!r}")
        if self.keep < 1:
            raise ValueError(f"keep: must be >= 1, got {self.keep!r}")
        if self.keep_best < 0:
            raise ValueError(f"keep_best: must be >= 0, got {self.keep_best!r}")
        if self.best_mode not in ("max", "min"):
            raise ValueError(f"best_mode: must be one of ('max', 'min'), got {self.best_mode!r}")
        if not self.best_metric.startswith(("evaluation/", "evaluation.", "episode_return_mean")):
            raise ValueError(
                "best_metric: must be evaluation/<field> (e.g. evaluation/episode_return_mean) "
                f"or episode_return_mean, got {self.best_metric!r}"
            )

    def frames_interval(self, total_frames: int) -> int:
        """Frames between checkpoints for a run of ``total_frames`` (0: none by frames)."""
        if self.interval_frames is None:
            return max(total_frames // 4, 1)
        return self.interval_frames


@dataclasses.dataclass(frozen=True)
class MetricsConfig:
    """The driver's Prometheus endpoint.

    Attributes:
        enabled: Serve ``/metrics``.
        host: Bind address (loopback unless you mean to expose it).
        port: Port; 0 lets the OS choose (the address is logged).
        tensorboard: Also write TensorBoard scalars to ``<run dir>/tensorboard`` (needs the
            ``tensorboard`` extra); the same as ``tensorboard`` in ``trackers``.
        trackers: Experiment trackers the run logs its config, progress metrics (frames as the
            step) and files to: ``tensorboard``, ``mlflow``, ``wandb`` (each an extra;
            ``--set metrics.trackers=mlflow,tensorboard``). A tracker that fails is logged and
            never stops training (``services.observe.trackers``).
        mlflow: The ``mlflow`` tracker's URI and experiment.
        wandb: The ``wandb`` tracker's project, entity, mode and group.
        sd_dir: Directory where the driver writes ``<run id>.json``, a Prometheus ``file_sd``
            target for its endpoint, removed at exit (None: none), e.g. the directory that
            ``deploy/prometheus/prometheus.yml`` watches.
        max_collector_series: Collectors up to which ``relayrl_rollouts_total`` (and a
            per-collector exploration list) has one series per collector; past it, one series
            per node sums its collectors, so Prometheus's cardinality does not grow with the
            fleet.
    """

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 0
    tensorboard: bool = False
    sd_dir: str | None = None
    max_collector_series: int = 64
    # Experiment trackers (services.observe.trackers)
    trackers: tuple[str, ...] = ()
    mlflow: MlflowSection = dataclasses.field(default_factory=MlflowSection)
    wandb: WandbSection = dataclasses.field(default_factory=WandbSection)

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"port: must be in [0, 65535], got {self.port!r}")
        if self.max_collector_series < 0:
            raise ValueError(
                f"max_collector_series: must be >= 0, got {self.max_collector_series!r}"
            )
        check_trackers(self.trackers)


@dataclasses.dataclass(frozen=True)
class RaySection:
    """The embedded local Ray (ignored when ``RAY_ADDRESS`` joins an existing cluster).

    Attributes:
        dashboard: Start Ray's dashboard on loopback (the state API behind ``ray list``,
            ``ray summary`` and the web UI needs it). Off by default: a run does not use it,
            and starting it adds to every run's start-up (``docs/benchmarks.md``).
    """

    dashboard: bool = False


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, one section per component.

    Attributes:
        algorithm: A registered algorithm (``learner.algorithms``; the default is the one
            registered as such): picks the loop, the loss and the collector policy
            (``services.config.recipes``); with :func:`load_config` its recipe fills every
            field the config leaves unset.
        seed: Run seed; every actor's seeds derive from it.
    """

    algorithm: str = DEFAULT
    seed: int = 0
    run: RunSection = dataclasses.field(default_factory=RunSection)
    collector: CollectorConfig = dataclasses.field(default_factory=CollectorConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    learner: LearnerConfig = dataclasses.field(default_factory=LearnerConfig)
    controller: ControllerConfig = dataclasses.field(default_factory=ControllerConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = dataclasses.field(default_factory=MetricsConfig)
    grpc: GrpcConfig = dataclasses.field(default_factory=GrpcConfig)
    ray: RaySection = dataclasses.field(default_factory=RaySection)
    evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)

    def __post_init__(self) -> None:
        if self.collector.num_collectors == 0 and not self.grpc.enabled:
            raise ValueError(
                "collector.num_collectors: 0 needs external actors, so grpc.port must be set, "
                "got 0 with grpc.port=null"
            )
        if self.replay.sampler == "prioritized" and not self.learner.update_priorities:
            raise ValueError(
                "learner.update_priorities: must be true with replay.sampler=prioritized, got False"
            )
        if self.collector.gamma != self.learner.gamma:
            raise ValueError(
                f"collector.gamma: must equal learner.gamma={self.learner.gamma} (n-step returns "
                f"are discounted collector-side), got {self.collector.gamma}"
            )
        if self.learner.loss.startswith("torchrl:") and self.collector.n_step != 1:
            raise ValueError(
                f"collector.n_step: must be 1 with learner.loss={self.learner.loss} (TorchRL's "
                f"estimators discount one step with one gamma), got {self.collector.n_step}"
            )
        uses_evaluation = self.checkpoint.keep_best and self.checkpoint.best_metric.startswith(
            "evaluation"
        )
        if uses_evaluation and not self.evaluation.enabled:
            raise ValueError(
                f"checkpoint.best_metric: {self.checkpoint.best_metric} needs evaluation, so "
                "evaluation.interval_frames must be > 0, got 0"
            )
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"algorithm: must be one of {tuple(ALGORITHMS)}, got {self.algorithm!r}"
            )
        check(self)
        check_deterministic(self)

    def to_dict(self) -> dict:
        """Plain nested dict (YAML/JSON serializable), literal secrets ``<redacted>``.

        Everything a run writes or reports goes through this (``config.yaml``, a checkpoint's
        ``config.json``, ``GetStatus``), so a literal ``grpc.token`` is never written.
        """
        data = _plain(dataclasses.asdict(self))
        data["grpc"] = redact_secrets(data["grpc"])
        return data

    def digest(self) -> str:
        """SHA-256 of the canonical JSON form."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
