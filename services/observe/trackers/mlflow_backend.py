"""The ``mlflow`` tracker (the ``mlflow`` extra: ``pip install "relayrl[mlflow]"``).

One MLflow run per relayrl run, named by the run id, in experiment ``metrics.mlflow.experiment``
(created when missing) at ``metrics.mlflow.tracking_uri``, by default a file store
``<storage root>/mlruns``. MLflow 3 keeps its file store behind ``MLFLOW_ALLOW_FILE_STORE``;
for a ``file:`` URI this backend sets it in the process (unless set), and reading the store back
needs it too (``MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri file:///...``).

Examples:
    >>> from services.config.trackers import MlflowSection
    >>> MlflowBackend(MlflowSection(), Path("/data/runs")).tracking_uri
    'file:///data/runs/mlruns'
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from services.config.trackers import MlflowSection

MAX_BATCH = 100  # MLflow's limit of params per log_batch call
MAX_PARAM_CHARS = 6000  # MLflow's limit of a param value's length
VIDEO_SUFFIXES = (".mp4", ".gif", ".webm")


class MlflowBackend:
    """Logs a run to MLflow through ``MlflowClient`` (see the module).

    Args:
        section: ``metrics.mlflow``.
        storage: The storage root (the default file store goes under it).

    Attributes:
        tracking_uri: Where the run is logged.
        run_id: The MLflow run's id (None before ``start``).
    """

    name = "mlflow"

    def __init__(self, section: MlflowSection, storage: Path) -> None:
        self.tracking_uri = section.tracking_uri or (Path(storage) / "mlruns").as_uri()
        self.experiment = section.experiment
        self.run_id: str | None = None
        self.client = None

    def start(
        self, run_id: str, run_dir: Path, params: Mapping[str, str], tags: Mapping[str, str]
    ) -> None:
        """Creates the experiment (when missing) and the run, and logs ``params``."""
        if self.tracking_uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.tracking_uri)
        experiment = client.get_experiment_by_name(self.experiment)
        if experiment is None:
            try:
                experiment_id = client.create_experiment(self.experiment)
            except MlflowException:  # another run created it meanwhile
                found = client.get_experiment_by_name(self.experiment)
                if found is None:
                    raise
                experiment_id = found.experiment_id
        else:
            experiment_id = experiment.experiment_id
        run_tags = {"relayrl.run_id": run_id, "relayrl.run_dir": str(run_dir), **tags}
        run = client.create_run(experiment_id, run_name=run_id, tags=run_tags)
        self.client, self.run_id = client, run.info.run_id
        items = [Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in params.items()]
        for begin in range(0, len(items), MAX_BATCH):
            client.log_batch(self.run_id, params=items[begin : begin + MAX_BATCH])

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Logs ``metrics`` at ``step`` (collected frames)."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        items = [Metric(k, v, stamp, step) for k, v in metrics.items()]
        for begin in range(0, len(items), MAX_BATCH * 10):
            self.client.log_batch(self.run_id, metrics=items[begin : begin + MAX_BATCH * 10])

    def files(self, paths: list[Path]) -> None:
        """Uploads ``paths`` as artifacts (videos under ``videos/``)."""
        for path in paths:
            folder = "videos" if path.suffix in VIDEO_SUFFIXES else None
            self.client.log_artifact(self.run_id, str(path), artifact_path=folder)

    def finish(self, status: str) -> None:
        """Ends the run (``FINISHED``, ``FAILED`` or ``KILLED``)."""
        self.client.set_terminated(self.run_id, status)

    def fields(self) -> dict:
        """``mlflow_tracking_uri`` and ``mlflow_run_id`` for the summary."""
        return {"mlflow_tracking_uri": self.tracking_uri, "mlflow_run_id": self.run_id}
