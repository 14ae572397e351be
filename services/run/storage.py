"""Where run data lives: the storage root, and the rule that keeps it out of a job's working dir.

Every run writes its directory (config, ``metrics.jsonl``, checkpoints, plots, the summary)
under a **storage root**, like Ray Train's ``storage_path``: ``run.storage`` when set, else the
``RELAYRL_STORAGE`` environment variable, else ``~/relayrl_results``. Each run gets
``<root>/<run id>/`` (``<run.name>-<YYYYmmdd-HHMMSS>-<token>``), and every path a run prints
is absolute.

Under ``ray job submit --working-dir .`` the driver runs inside the job's unpacked working
directory (``/tmp/ray/session_*/runtime_resources/working_dir_files/...``), which Ray deletes
when it garbage-collects the package; :func:`check_outside_job_dir` refuses run data placed
there, naming the field. On a cluster, point the root at storage every node mounts (NFS, a
PVC): replay shards on other nodes write their checkpoint files there.

Examples:
    >>> str(storage_root("/data/results"))
    '/data/results'
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STORAGE_ENV = "RELAYRL_STORAGE"
DEFAULT_STORAGE = "~/relayrl_results"
# Ray's job supervisor hands a submitted driver its runtime_env in this variable.
_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def storage_root(configured: str | Path | None = None) -> Path:
    """The absolute storage root: ``configured``, else ``$RELAYRL_STORAGE``, else the default.

    Relative paths resolve against the working directory (a job's is refused by
    :func:`check_outside_job_dir`); ``~`` expands to the user's home.
    """
    raw = configured or os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE
    return Path(raw).expanduser().absolute()


def job_working_dir() -> Path | None:
    """The working directory Ray unpacked for this submitted job, or None outside such a job."""
    raw = os.environ.get(_JOB_CONFIG_ENV)
    if not raw:
        return None
    try:
        runtime_env = json.loads(raw).get("runtime_env") or {}
    except (ValueError, AttributeError):
        return None
    return Path.cwd().absolute() if runtime_env.get("working_dir") else None


def check_outside_job_dir(paths: dict[str, str | Path | None]) -> None:
    """Refuses run data inside a submitted job's working directory.

    Args:
        paths: Config field (``run.storage``) to the absolute path it resolves to; None
            entries are skipped.

    Raises:
        ValueError: ``"<field>: ..."`` naming the first path inside the working directory.
    """
    workdir = job_working_dir()
    if workdir is None:
        return
    for field, path in paths.items():
        if path is None:
            continue
        resolved = Path(path).expanduser().absolute()
        if resolved == workdir or workdir in resolved.parents:
            raise ValueError(
                f"{field}: {resolved} is inside the job's working directory {workdir}, which "
                f"Ray deletes; use an absolute path outside it (default {DEFAULT_STORAGE}, "
                f"or ${STORAGE_ENV}; shared storage on a multi-node cluster)"
            )


def check_run_paths(config, **extra: str | Path | None) -> None:
    """Applies :func:`check_outside_job_dir` to a RunConfig's ``run`` and ``checkpoint`` paths.

    Args:
        config: The run's ``RunConfig``.
        **extra: More named paths (the sweep's ``--dir``).

    Raises:
        ConfigError: Naming the field.
    """
    from services.config import ConfigError

    try:
        check_outside_job_dir(
            {
                "run.dir": config.run.dir,
                "run.storage": None if config.run.dir else storage_root(config.run.storage),
                "checkpoint.dir": config.checkpoint.dir,
                **extra,
            }
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
