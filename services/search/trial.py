"""One Tune trial = one relayrl run (then, after a PBT exploit, its resumed continuation).

:class:`RelayTrial` is a thin ``tune.Trainable`` shell over :func:`services.run.launch.
prepare_run`: the run's driver (its ``Controller``) runs in a thread of the trial's actor and
starts the run's own collectors, replay shards and learners in the run's own placement groups,
with its own run id, directory and Prometheus endpoint. Every ``step`` returns the next
progress line that carries the searched metric, with ``frames`` (Tune's time attribute);
``save_checkpoint`` hands Tune the run's newest consistent checkpoint (hard links, no copy of
the replay where the filesystem allows), ``load_checkpoint`` takes one back: a PBT exploit
(the donor is another trial) or a restore. The run then resumes from that checkpoint with the
trial's current, possibly mutated, config: frames, steps, replay and weights continue, and the
optimizer runs at the config's learning rate (``learner.stepper.reapply_hyperparameters``).
Each exploit appends one line to ``<tune dir>/lineage.jsonl``. A stopped trial (ASHA, the end,
Ctrl-C) stops its run at the next boundary, which cuts a final checkpoint; a trial restarted
by ``--resume`` resumes the newest checkpoint of its last run (``trials/<trial id>.json``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import queue
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ray import tune

from services.checkpoints.store import latest_valid
from services.config import RunConfig, config_from_dict

logger = logging.getLogger(__name__)
_DONE = object()
CHECKPOINT_WAIT_S = 120.0  # the longest save_checkpoint waits for the run's first cut
STOP_WAIT_S = 300.0  # the longest a stopped trial waits for its run's final checkpoint


@dataclasses.dataclass(frozen=True)
class TrialSpec:
    """What every trial shares (handed to the trainable by ``tune.with_parameters``).

    Attributes:
        raw: The config file's mapping with ``--set`` applied (:func:`space.raw_config`).
        fixed: Overrides every trial gets (frames budget, storage, checkpoint interval).
        tune_dir: The search's directory.
        metric: The searched metric (``episode_return_mean``, ``evaluation/...``).
    """

    raw: dict
    fixed: dict
    tune_dir: str
    metric: str

    def config_for(self, values: dict) -> RunConfig:
        """The trial's run config: the base, the fixed overrides, then its values."""
        return config_from_dict(self.raw, {**self.fixed, **values})


def metric_value(snapshot: dict, metric: str) -> float | None:
    """``metric`` read from a progress snapshot (``a/b`` looks in block ``a``); None if absent."""
    node: Any = snapshot
    for part in metric.split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, int | float) and math.isfinite(node):
        return float(node)
    return None


def link_tree(source: Path, target: Path) -> None:
    """Copies a checkpoint directory as hard links (files are never rewritten), else copies."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link)


class RelayTrial(tune.Trainable):
    """The trainable of ``relayrl tune`` (see the module)."""

    def setup(self, config: dict, spec: TrialSpec) -> None:
        """Keeps the trial's values; the run starts at the first ``step``."""
        self._init(config, spec)

    def _init(self, config: dict, spec: TrialSpec) -> None:
        self.spec = spec
        self.values = dict(config)
        self.tune_dir = Path(spec.tune_dir)
        self.resume: Path | None = None
        self.run = None
        self.thread: threading.Thread | None = None
        self.lines: queue.Queue = queue.Queue()
        self.summary: dict | None = None
        self.error: BaseException | None = None
        self.last: dict = {}
        self.cut = threading.Event()  # set at each of the run's checkpoints

    # -- the run -------------------------------------------------------------------------------
    def _state_file(self) -> Path:
        return self.tune_dir / "trials" / f"{self.trial_id}.json"

    def _start(self) -> None:
        from services.run.launch import prepare_run

        if self.resume is None and self._state_file().exists():  # --resume: its own last run
            previous = json.loads(self._state_file().read_text())
            try:
                self.resume = latest_valid(Path(previous["run_dir"]) / "checkpoints")[0]
            except Exception:  # no valid checkpoint yet: the trial starts over
                self.resume = None
        config = self.spec.config_for(self.values)
        tags = {"tune.trial_id": self.trial_id, "tune.dir": str(self.tune_dir)}
        self.run = prepare_run(
            config,
            resume=self.resume,
            progress=lambda _, snapshot: self.lines.put(snapshot),
            tracker_tags={**tags, **{f"tune.{k}": str(v) for k, v in self.values.items()}},
        )
        state = {"trial_id": self.trial_id, "run_id": self.run.run_id}
        state.update(run_dir=str(self.run.run_dir), values=self.values)
        self._state_file().parent.mkdir(parents=True, exist_ok=True)
        self._state_file().write_text(json.dumps(state) + "\n")
        self.run.controller.register("checkpoint", lambda *_: self.cut.set())
        self.thread = threading.Thread(target=self._execute, name="relayrl-run", daemon=True)
        self.thread.start()

    def _execute(self) -> None:
        try:
            self.summary = self.run.execute()
        except BaseException as err:  # reported to Tune by the next step
            self.error = err
        finally:
            self.lines.put(_DONE)

    def _result(self, snapshot: dict, value: float) -> dict:
        result = {
            "frames": int(snapshot["frames"]),
            self.spec.metric: value,
            "episode_return_mean": snapshot.get("episode_return_mean"),
            "optim_steps": snapshot.get("optim_steps"),
            "run_id": self.run.run_id,
            "run_dir": str(self.run.run_dir),
        }
        self.last = result
        return result

    def step(self) -> dict:
        """The next progress line with the metric; at the run's end its summary, ``done``."""
        if self.run is None:
            self._start()
        while True:
            item = self.lines.get()
            if item is _DONE:
                break
            value = metric_value(item, self.spec.metric)
            if value is not None:
                return self._result(item, value)
        if self.error is not None:
            raise self.error
        assert self.summary is not None  # the run ended without an error
        final = dict(self.last)
        final.update(frames=self.summary["frames"], run_id=self.summary["run_id"])
        final.update(done=True, run_finished=True)  # Tune marks a stopped trial's last done too
        value = metric_value(self.summary, self.spec.metric)
        if value is not None:
            final[self.spec.metric] = value
        final["checkpoint"] = self.summary.get("checkpoint")
        return final

    # -- checkpoints ---------------------------------------------------------------------------
    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """Links the run's newest consistent checkpoint into ``checkpoint_dir``."""
        assert self.run is not None  # Tune saves after a step
        rotation = self.run.run_dir / "checkpoints"
        deadline = time.monotonic() + CHECKPOINT_WAIT_S
        newest = None
        while newest is None:
            try:
                newest = latest_valid(rotation)[0]
            except Exception:
                alive = self.thread is not None and self.thread.is_alive()
                if not alive or time.monotonic() > deadline:
                    raise
                self.cut.wait(1.0)  # the run's first cut is due within one interval
        link_tree(newest, Path(checkpoint_dir) / "relayrl")
        meta = {"trial_id": self.trial_id, "run_id": self.run.run_id, "values": self.values}
        meta.update(checkpoint=str(newest), frames=_frames_of(newest))
        (Path(checkpoint_dir) / "trial.json").write_text(json.dumps(meta) + "\n")

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        """Takes a checkpoint (a PBT donor's, or this trial's own) for the next run to resume."""
        meta = json.loads((Path(checkpoint_dir) / "trial.json").read_text())
        copies = self.tune_dir / "exploits"
        copies.mkdir(parents=True, exist_ok=True)
        target = copies / f"{self.trial_id}-{time.time_ns()}"
        link_tree(Path(checkpoint_dir) / "relayrl", target)
        self.resume = target
        if meta["trial_id"] == self.trial_id:
            return  # a restore of its own state, not an exploit
        mutation = {k: v for k, v in self.values.items() if meta["values"].get(k) != v}
        line = {
            "frame": meta["frames"],
            "donor": meta["trial_id"],
            "receiver": self.trial_id,
            "mutation": mutation,
            "donor_run_id": meta["run_id"],
            "donor_checkpoint": meta["checkpoint"],
            "receiver_checkpoint": str(target),
            "config": self.values,
            "time": time.time(),
        }
        with open(self.tune_dir / "lineage.jsonl", "a") as file:  # one write per line
            file.write(json.dumps(line) + "\n")
        logger.info(
            "exploit: %s <- %s at %d frames", self.trial_id, meta["trial_id"], line["frame"]
        )

    def reset_config(self, new_config: dict) -> bool:
        """Reuses this actor for ``new_config`` (an exploit's receiver, or another trial).

        The current run stops at its next boundary (a final checkpoint); the next ``step``
        starts the trial's next run, resuming the checkpoint ``load_checkpoint`` names, if any.
        """
        self.cleanup()
        self._init(new_config, self.spec)
        return True

    def cleanup(self) -> None:
        """Stops the run at its next boundary (a final checkpoint) and waits for it."""
        if self.run is not None and self.thread is not None and self.thread.is_alive():
            self.run.controller.request_stop("tune: trial stopped")
            self.thread.join(STOP_WAIT_S)


def _frames_of(checkpoint: Path) -> int:
    """The collected frames a checkpoint holds (its ``driver.json`` counters)."""
    counters = json.loads((checkpoint / "driver.json").read_text())["counters"]
    return int(counters.get("collected_frames", 0))
