"""The experiment trackers of ``metrics.trackers`` and their sub-sections (no imports of them).

``metrics.trackers: [tensorboard, mlflow, wandb]`` names where a run's parameters, progress
metrics and files go besides ``metrics.jsonl`` and Prometheus (``services.observe.trackers``
sends them). Each tracker but TensorBoard is an extra; :func:`check_tracker_extras` refuses a
config naming one whose package is missing, before anything starts, naming the extra.

Examples:
    >>> MlflowSection().experiment
    'relayrl'
    >>> tracker_names("mlflow, tensorboard")
    ('mlflow', 'tensorboard')
"""

from __future__ import annotations

import dataclasses
import importlib.util

# tracker -> (module it needs, the extra that installs it)
TRACKERS = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
    "wandb": ("wandb", "wandb"),
}


def tracker_names(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``"mlflow,tensorboard"`` or a list of names -> a tuple of stripped names."""
    items = value.split(",") if isinstance(value, str) else value
    return tuple(str(item).strip() for item in items if str(item).strip())


@dataclasses.dataclass(frozen=True)
class MlflowSection:
    """Where the ``mlflow`` tracker logs (``metrics.mlflow``).

    Attributes:
        tracking_uri: MLflow's tracking URI (``http://host:5000``, ``sqlite:///path.db``,
            ``file:///path``); None: a file store ``<storage root>/mlruns`` (the runs of a sweep
            or a tune search: under its directory).
        experiment: The experiment the run is logged under (created when missing).
    """

    tracking_uri: str | None = None
    experiment: str = "relayrl"

    def __post_init__(self) -> None:
        if not self.experiment:
            raise ValueError("experiment: must be a non-empty string, got ''")


@dataclasses.dataclass(frozen=True)
class WandbSection:
    """Where the ``wandb`` tracker logs (``metrics.wandb``).

    Attributes:
        project: The W&B project.
        entity: The W&B entity (team or user); None: the account's default.
        mode: ``online``, ``offline`` or ``disabled``; None: ``WANDB_MODE`` or W&B's default.
            Offline runs need no network and stay under ``<run dir>/wandb/``
            (``wandb sync`` uploads them later).
        group: Groups the runs of a sweep or tune search in W&B's UI (None: no group).
    """

    project: str = "relayrl"
    entity: str | None = None
    mode: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in (None, "online", "offline", "disabled"):
            raise ValueError(f"mode: must be online, offline, disabled or null, got {self.mode!r}")
        if not self.project:
            raise ValueError("project: must be a non-empty string, got ''")


def check_trackers(trackers: tuple[str, ...]) -> None:
    """Refuses an unknown or repeated tracker name.

    Raises:
        ValueError: ``trackers: ...`` naming the accepted names.
    """
    for name in trackers:
        if name not in TRACKERS:
            raise ValueError(f"trackers: must name {', '.join(TRACKERS)}, got {name!r}")
    if len(set(trackers)) != len(trackers):
        raise ValueError(f"trackers: each tracker once, got {list(trackers)}")


def missing_extra(name: str) -> str | None:
    """The install hint for tracker ``name`` when its package is missing, else None."""
    module, extra = TRACKERS[name]
    if importlib.util.find_spec(module) is not None:
        return None
    return f'metrics.trackers: {name} needs the {extra} extra: pip install "relayrl[{extra}]"'


def check_tracker_extras(metrics) -> None:
    """Refuses trackers whose extra is not installed (``metrics``: the ``metrics`` section).

    Raises:
        ConfigError: Naming the tracker and the extra to install.
    """
    from services.config.sections import ConfigError

    names = list(metrics.trackers)
    if metrics.tensorboard and "tensorboard" not in names:
        names.append("tensorboard")
    for name in names:
        hint = missing_extra(name)
        if hint is not None:
            raise ConfigError(hint)
