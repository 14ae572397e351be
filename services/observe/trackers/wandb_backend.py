"""The ``wandb`` tracker (the ``wandb`` extra: ``pip install "relayrl[wandb]"``).

One W&B run per relayrl run: name and id the run id, config the flattened resolved config (and
the caller's tags), history the progress metrics with the collected frames as ``_step``, the
summary's numbers as the W&B summary, and ``summary.json``, ``config.yaml`` and videos copied
into the run's files. Its local files go under ``<run dir>/wandb/``; with ``WANDB_MODE=offline``
(or ``metrics.wandb.mode: offline``) nothing needs a network and ``wandb sync <run dir>/wandb``
uploads the run later. W&B's console capture and system statistics are off (the run's
standard output is relayrl's own).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from services.config.trackers import WandbSection

_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class WandbBackend:
    """Logs a run to Weights & Biases (see the module).

    Args:
        section: ``metrics.wandb``.

    Attributes:
        run: The ``wandb`` run (None before ``start``).
    """

    name = "wandb"

    def __init__(self, section: WandbSection) -> None:
        self.section = section
        self.run = None
        self.last_step = -1

    def start(
        self, run_id: str, run_dir: Path, params: Mapping[str, str], tags: Mapping[str, str]
    ) -> None:
        """``wandb.init`` for the run, with ``params`` and ``tags`` as its config."""
        import wandb

        settings = wandb.Settings(
            console="off", x_disable_stats=True, quiet=True, disable_git=True, save_code=False
        )
        self.run = wandb.init(
            project=self.section.project,
            entity=self.section.entity,
            group=self.section.group,
            mode=self.section.mode,
            name=run_id,
            id=run_id if _RUN_ID.match(run_id) else None,
            dir=str(run_dir),
            config={**params, **{f"tag.{k}": v for k, v in tags.items()}},
            reinit="create_new",
            settings=settings,
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Logs ``metrics`` at ``_step`` = collected frames (a step below the last is skipped)."""
        if step < self.last_step:
            return
        self.last_step = step
        self.run.log(dict(metrics), step=step)

    def files(self, paths: list[Path]) -> None:
        """Copies ``paths`` into the run's files; the summary's numbers become its summary."""
        for path in paths:
            if path.name == "summary.json":
                summary = json.loads(path.read_text())
                numbers = {
                    k: v
                    for k, v in summary.items()
                    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                }
                self.run.summary.update(numbers)
            target = Path(self.run.dir) / ("videos" if path.suffix == ".mp4" else "") / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            self.run.save(str(target), base_path=self.run.dir, policy="now")

    def finish(self, status: str) -> None:
        """Ends the run (exit code 0 when ``FINISHED``, else 1)."""
        self.run.finish(exit_code=0 if status == "FINISHED" else 1)

    def fields(self) -> dict:
        """``wandb_run_id`` and ``wandb_dir`` (the run's local directory) for the summary."""
        if self.run is None:
            return {"wandb_run_id": None, "wandb_dir": None}
        return {"wandb_run_id": self.run.id, "wandb_dir": str(Path(self.run.dir).parent)}
