"""The run directory: resolved config, JSONL metrics log, checkpoints, the summary.

Each run gets its own directory ``<run.storage>/<run id>`` (see :mod:`services.driver.runid`; the
storage root is resolved by :mod:`services.run.storage`, default ``~/relayrl_results``), created
exclusively, so two runs never write into one another's ``metrics.jsonl``, ``config.yaml`` or
checkpoint rotation. ``run.dir`` names a directory explicitly instead (the user's choice).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from services.driver.runid import new_run_id, random_token
from services.run.storage import storage_root


def resolve_run_dir(
    name: str,
    configured: str | None,
    storage: str | Path | None = None,
    *,
    run_id: str | None = None,
) -> tuple[str, Path]:
    """Picks the run id and creates the run directory.

    Args:
        name: ``run.name``, the human part of the id.
        configured: ``run.dir``: used as is (created if missing) when set.
        storage: ``run.storage``: the root of default run directories (None:
            :func:`services.run.storage.storage_root`'s default).

    Keyword Args:
        run_id: The id to use (default: :func:`services.driver.runid.new_run_id`).

    Returns:
        The run id and the absolute run directory. Without ``configured`` the directory is
        ``<storage>/<run id>``, created exclusively: should it exist (an id given twice, or
        a token drawn twice), a fresh random token is drawn.
    """
    run_id = run_id or new_run_id(name)
    if configured:
        path = Path(configured).expanduser().absolute()
        path.mkdir(parents=True, exist_ok=True)
        return run_id, path
    root = storage_root(storage)
    root.mkdir(parents=True, exist_ok=True)
    for _ in range(8):
        try:
            (root / run_id).mkdir()
            return run_id, root / run_id
        except FileExistsError:
            run_id = new_run_id(name, token=random_token())
    raise FileExistsError(f"run.storage: no fresh run directory under {root}")


def finite(value):
    """Replaces NaN and infinities with None, recursively (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


class RunLog:
    """Writes ``config.yaml`` once and appends progress snapshots to ``metrics.jsonl``."""

    def __init__(self, run_dir: Path, config_dict: dict) -> None:
        self.run_dir = run_dir
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config_dict, sort_keys=False))
        self.file = (run_dir / "metrics.jsonl").open("a", buffering=1)

    def write(self, record: dict) -> None:
        """Appends one JSON line (NaN becomes null)."""
        self.file.write(json.dumps(finite(record)) + "\n")

    def close(self) -> None:
        """Closes the log file."""
        self.file.close()


def write_summary(run_dir: Path, summary: dict) -> Path:
    """Writes the run's final summary to ``<run dir>/summary.json`` and returns its path."""
    path = run_dir / "summary.json"
    path.write_text(json.dumps(finite(summary), indent=1) + "\n")
    return path
