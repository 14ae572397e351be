"""The run directory: resolved config, JSONL metrics log, checkpoints."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import yaml


def resolve_run_dir(name: str, configured: str | None) -> Path:
    """``configured`` if set, else ``runs/<name>-<YYYYmmdd-HHMMSS>``; created if missing."""
    path = (
        Path(configured)
        if configured
        else Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    path.mkdir(parents=True, exist_ok=True)
    return path


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
