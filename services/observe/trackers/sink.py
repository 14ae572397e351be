"""The trackers' sink: one worker thread makes every tracker call, failures are logged.

A backend is a small object with ``name``, ``start(run_id, run_dir, params, tags)``,
``log(metrics, step)``, ``files(paths)``, ``finish(status)`` and ``fields()`` (what the run's
summary names, e.g. ``mlflow_run_id``). :class:`Trackers` queues the calls and makes them in
order on its thread: a backend whose ``start`` raises is logged and skipped from then on; a
failed ``log`` or ``files`` call is logged (the first few of each backend) and the next is
tried. The driver's ``progress`` hook only enqueues (a full queue drops the line, counted).

Examples:
    >>> flat_params({"learner": {"lr": 0.001, "hidden_sizes": [64, 64]}, "seed": 0})
    {'learner.lr': '0.001', 'learner.hidden_sizes': '[64, 64]', 'seed': '0'}
    >>> scalars({"frames": 10, "episode_return_mean": 9.5, "learner": {"loss": 0.25}})
    {'episode_return_mean': 9.5, 'learner/loss': 0.25}
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# Top-level progress numbers sent as metrics (besides the learner/exploration/evaluation blocks).
PROGRESS_SCALARS = (
    "episode_return_mean",
    "episode_length_mean",
    "episodes",
    "optim_steps",
    "model_version",
    "frames_per_s",
    "updates_per_s",
    "update_to_data",
)
QUEUE_SIZE = 4096
FINISH_TIMEOUT_S = 60.0  # the longest a run's end waits for its trackers
LOGGED_FAILURES = 3  # failed calls logged per backend (later ones only counted)
_STOP = object()


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """The resolved config as ``{"section.field": "value"}`` (lists as JSON)."""
    params: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            params.update(flat_params(value, f"{name}."))
        elif isinstance(value, list | tuple | Mapping):
            params[name] = json.dumps(value)
        else:
            params[name] = str(value)
    return params


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def scalars(snapshot: Mapping[str, Any]) -> dict[str, float]:
    """A progress snapshot's finite numbers as tracker metrics (the step is its ``frames``)."""
    metrics = {k: float(snapshot[k]) for k in PROGRESS_SCALARS if _finite(snapshot.get(k))}
    for block in ("learner", "exploration", "evaluation"):
        for name, value in (snapshot.get(block) or {}).items():
            if _finite(value):
                metrics[f"{block}/{name}"] = float(value)
    return metrics


class Trackers:
    """Sends one run's params, metrics and files to its backends from a worker thread.

    Args:
        backends: The backends (``mlflow_backend.MlflowBackend``, ``wandb_backend.WandbBackend``).

    Keyword Args:
        run_id: The run's id (the trackers' run name).
        run_dir: The run's directory.
        params: The flattened config (:func:`flat_params`).
        tags: Extra tags.

    Attributes:
        errors: The first error of each backend that failed, by name.
        dropped: Progress lines dropped because the queue was full.
    """

    def __init__(
        self,
        backends: Sequence,
        *,
        run_id: str,
        run_dir: Path,
        params: Mapping[str, str],
        tags: Mapping[str, str] | None = None,
    ) -> None:
        self.backends = list(backends)
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        self.errors: dict[str, str] = {}
        self.dropped = 0
        self._failures: dict[str, int] = {}
        self._dead: set[str] = set()
        self._started = threading.Event()
        self._queue: queue.Queue = queue.Queue(QUEUE_SIZE)
        self._queue.put(("start", dict(params), dict(tags or {})))
        self._thread = threading.Thread(target=self._work, name=f"trackers-{run_id}", daemon=True)
        self._thread.start()

    # -- the driver's side ----------------------------------------------------------------------
    def attach(self, controller) -> None:
        """Sends every progress snapshot of ``controller`` (its ``progress`` hook)."""
        controller.register("progress", self.progress)

    def progress(self, controller, snapshot: dict) -> None:
        """Queues one snapshot's metrics at step = its collected frames (never blocks)."""
        try:
            self._queue.put_nowait(("log", scalars(snapshot), int(snapshot["frames"])))
        except queue.Full:
            self.dropped += 1

    def fields(self, timeout: float = FINISH_TIMEOUT_S) -> dict:
        """What the summary names (``mlflow_run_id``, ...), once the trackers have started.

        Waits up to ``timeout`` seconds for their start; a backend not started by then (or
        failed) names None for its run id, and ``tracker_errors`` says why.
        """
        if not self._started.wait(timeout):
            logger.warning("trackers: not started after %.0fs; their ids are omitted", timeout)
        fields: dict[str, Any] = {}
        for backend in self.backends:
            fields.update(backend.fields())
        if self.errors:
            fields["tracker_errors"] = dict(self.errors)
        return fields

    def close(
        self,
        files: Sequence[Path] = (),
        *,
        status: str = "FINISHED",
        timeout: float = FINISH_TIMEOUT_S,
    ) -> None:
        """Uploads ``files``, ends the trackers' runs with ``status`` and stops the thread.

        Waits up to ``timeout`` seconds; a tracker still busy then is left behind (logged).
        """
        for item in (("files", [Path(f) for f in files if Path(f).exists()]), ("finish", status)):
            try:
                self._queue.put(item, timeout=timeout)
            except queue.Full:
                logger.warning("trackers: queue full at the end; %s skipped", item[0])
        self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("trackers: still busy after %.0fs; left behind", timeout)
        if self.dropped:
            logger.warning("trackers: %d progress lines dropped (queue full)", self.dropped)

    # -- the worker thread ----------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            kind, *args = item
            for backend in self.backends:
                if backend.name not in self._dead:
                    self._call(backend, kind, args)
            if kind == "start":
                self._started.set()

    def _call(self, backend, kind: str, args: list) -> None:
        try:
            if kind == "start":
                backend.start(self.run_id, self.run_dir, *args)
            else:
                getattr(backend, {"log": "log", "files": "files", "finish": "finish"}[kind])(*args)
        except Exception as err:  # a tracker never stops training
            self.errors.setdefault(backend.name, f"{type(err).__name__}: {err}")
            count = self._failures[backend.name] = self._failures.get(backend.name, 0) + 1
            if kind == "start":
                self._dead.add(backend.name)
                logger.warning(
                    "tracker %s: could not start (%s: %s); the run goes on without it",
                    backend.name,
                    type(err).__name__,
                    err,
                )
            elif count <= LOGGED_FAILURES:
                logger.warning(
                    "tracker %s: %s failed (%s: %s); training goes on",
                    backend.name,
                    kind,
                    type(err).__name__,
                    err,
                )
