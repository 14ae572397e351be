"""Experiment trackers: a run's config, progress metrics and files sent to MLflow and W&B.

``metrics.trackers: [tensorboard, mlflow, wandb]`` (``services.config.trackers``) picks them.
TensorBoard writes event files on the driver thread (``services.observe.tensorboard``); MLflow
and W&B are reached through a :class:`~services.observe.trackers.sink.Trackers` sink whose one
worker thread makes every call, so a slow or unreachable tracking server never delays the
driver loop. What each tracker receives:

- **params**: the resolved config flattened to dotted keys (``learner.lr``), plus the tags the
  caller adds (a tune trial's id);
- **metrics**: every progress line's numbers (``episode_return_mean``, ``learner/<name>``,
  ``exploration/<name>``, ``evaluation/<name>``, ...), with the collected frames as the step;
- **files**: the run's ``summary.json`` and ``config.yaml``, and videos under the run directory;
- **identity**: the run name is the run id; the summary names ``mlflow_tracking_uri`` and
  ``mlflow_run_id`` (and ``wandb_run_id``, ``wandb_dir``).

A tracker that fails (its package raises, its server is down) is logged with its name and
dropped or retried, never raised: training goes on. Modules: ``sink`` (the worker thread and the
flattening), ``mlflow_backend``, ``wandb_backend``.

Examples:
    >>> from services.config import load_config
    >>> start_trackers(load_config(), run_id="r", run_dir=Path("/tmp/r")) is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from services.config import RunConfig
from services.observe.trackers.sink import Trackers, flat_params, scalars


def start_trackers(
    config: RunConfig,
    *,
    run_id: str,
    run_dir: Path,
    storage: Path | None = None,
    tags: Mapping[str, str] | None = None,
) -> Trackers | None:
    """Starts the MLflow and W&B trackers ``config.metrics.trackers`` names (None: neither).

    The trackers' own start (imports, the MLflow run, ``wandb.init``) runs on the sink's
    thread; this returns at once.

    Args:
        config: The run's config (its resolved form becomes the params).

    Keyword Args:
        run_id: The run's id (the tracker's run name).
        run_dir: The run's directory (W&B's files go under ``<run dir>/wandb/``).
        storage: The storage root (MLflow's default file store is ``<storage>/mlruns``;
            None: the run directory's parent).
        tags: Extra tags (and W&B config entries), e.g. a tune trial's id.
    """
    backends = []
    names = config.metrics.trackers
    if "mlflow" in names:
        from services.observe.trackers.mlflow_backend import MlflowBackend

        backends.append(MlflowBackend(config.metrics.mlflow, storage or Path(run_dir).parent))
    if "wandb" in names:
        from services.observe.trackers.wandb_backend import WandbBackend

        backends.append(WandbBackend(config.metrics.wandb))
    if not backends:
        return None
    params = flat_params(config.to_dict())
    return Trackers(backends, run_id=run_id, run_dir=run_dir, params=params, tags=dict(tags or {}))


__all__ = ["Trackers", "flat_params", "scalars", "start_trackers"]
