"""Consistent cuts and ordered restores of a running job (driver side).

Save (:func:`save_cut`): the controller first drains its in-flight rollouts and learner round
(counting their receipts), then the collectors' pause barrier holds, then in parallel every
replay shard dumps its files, every collector returns its state and every learner rank returns
its state; the driver writes those and its own counters, then the manifest, then resumes.

Restore (:func:`restore`): replay shards, then collectors, then driver counters, then learners
as a new generation (world size validated), then a forced weight publication; collection
resumes when the loop starts.

Files of a checkpoint: ``replay-<i>/`` (written by each shard itself), ``collector-<i>.json/.npz``,
``learner-<rank>.pt`` (``torch.load(weights_only=True)``), ``driver.json``, ``config.json``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from replay.npyio import CheckpointError
from services.checkpoints.resume import PINNED_FIELDS, check_compatible, resolve_resume
from services.checkpoints.statefile import load_state, save_state
from services.checkpoints.store import CheckpointStore, read_json, write_json

if TYPE_CHECKING:
    from services.driver.views import CutView

logger = logging.getLogger(__name__)

__all__ = [
    "PINNED_FIELDS",
    "check_compatible",
    "drain",
    "recover_learners",
    "resolve_resume",
    "restore_learners",
    "restore_services",
    "save_cut",
]


def drain(controller: CutView) -> None:
    """Counts every in-flight rollout and finishes the in-flight learner round."""
    while controller.inflight or controller.pending_round is not None:
        controller.wait_and_process(timeout=controller.config.controller.log_interval_s)


def save_cut(controller: CutView, store: CheckpointStore) -> Path:
    """Writes a consistent checkpoint of the running job and returns its directory."""
    started = time.perf_counter()
    drain(controller)
    controller.learners.flush_replay()  # the learners' priority updates belong to the cut
    # A collector Ray is restarting must be back: its state belongs to the cut.
    controller.collectors.wait_alive(controller.config.collector.rollout_timeout_s)
    controller.collectors.pause()
    staging = store.stage(controller.counters.collected_frames)
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            replay = pool.submit(controller.replay.dump, staging)
            collectors = pool.submit(controller.collectors.state_dicts)
            learners = pool.submit(controller.learners.state_dicts)
            for i, state in enumerate(collectors.result()):
                save_state(staging / f"collector-{i}", state)
            for rank, state in enumerate(learners.result()):
                torch.save(state, staging / f"learner-{rank}.pt")
            replay_files = replay.result()
        counters = dataclasses.asdict(controller.counters)
        write_json(staging / "driver.json", driver_state(controller))
        write_json(staging / "config.json", controller.config.to_dict())
        path = store.commit(
            staging,
            config_digest=controller.config.digest(),
            counters={**counters, "replay_shards": len(replay_files)},
        )
    except BaseException:
        store.abort(staging)
        raise
    finally:
        controller.collectors.resume()
    seconds = time.perf_counter() - started
    logger.info("checkpoint %s written in %.2fs", path, seconds)
    controller.last_checkpoint = path
    controller.emit("checkpoint", path, seconds)
    return path


def driver_state(controller: CutView) -> dict:
    """The driver's own part of a checkpoint (counters, episode window, milestones)."""
    evaluation = controller.evaluation
    accounting = controller.accounting
    return {
        **accounting.state_dict(),  # counters, episode_returns, episode_lengths, milestones
        "next_checkpoint_frames": controller.cadence.next_frames,
        "elapsed_s": accounting.elapsed_s(),
        "loop": controller.loop.state_dict(),
        "evaluation": evaluation.state_dict() if evaluation is not None else None,
        # Run identity: a resumed run gets a new id and carries its predecessors' ids.
        "run_id": controller.run_id,
        "lineage": list(controller.lineage),
    }


def load_driver_state(controller: CutView, state: dict) -> None:
    """Restores :func:`driver_state`."""
    controller.accounting.load_state_dict(state)
    controller.loop.load_state_dict(state.get("loop", {}))
    if controller.evaluation is not None:
        controller.evaluation.load_state_dict(state.get("evaluation"))
    previous = [*state.get("lineage", []), state.get("run_id")]
    controller.lineage = [run_id for run_id in previous if run_id]
    controller.cadence.restore(controller.counters.collected_frames)


def load_learner_states(checkpoint: Path, world_size: int) -> list[dict]:
    """Reads every rank's state with ``weights_only=True``.

    Raises:
        CheckpointError: Naming an unreadable file.
    """
    states = []
    for rank in range(world_size):
        path = checkpoint / f"learner-{rank}.pt"
        try:
            states.append(torch.load(path, weights_only=True, map_location="cpu"))
        except (OSError, RuntimeError, ValueError) as err:
            raise CheckpointError(f"{path}: unreadable ({err})") from None
    return states


def restore_services(controller: CutView, checkpoint: Path) -> dict:
    """Restores replay shards, then collectors, then the driver's counters.

    Returns:
        The driver state, whose ``generation`` the new learner generation follows.
    """
    controller.replay.load(checkpoint)
    states = [load_state(checkpoint / f"collector-{i}") for i in range(len(controller.collectors))]
    controller.collectors.load_state_dicts(states)
    driver = read_json(checkpoint / "driver.json")
    load_driver_state(controller, driver)
    return driver


def restore_learners(controller: CutView, checkpoint: Path) -> int:
    """Loads the learner states into the (new generation) group; returns the version."""
    states = load_learner_states(checkpoint, controller.config.learner.world_size)
    version = controller.learners.load_state_dicts(states)
    counters = controller.counters
    counters.model_version = version
    counters.optim_steps = version
    return version


def recover_learners(controller: CutView, error: Exception) -> None:
    """A learner rank died: restore the group from the latest checkpoint as a new generation."""
    if controller.last_checkpoint is None:
        raise RuntimeError(
            f"{error}; there is no checkpoint to restore the learners from yet (periodic "
            "checkpoints: checkpoint.interval_frames, checkpoint.interval_s); stopping the run"
        ) from error
    logger.warning(
        "%s; restoring the learners from %s as generation %d",
        error,
        controller.last_checkpoint,
        controller.counters.generation + 1,
    )
    controller.pending_round = None
    controller.learners.shutdown()
    controller.counters.generation += 1
    controller.learners = controller.start_learners()
    restore_learners(controller, controller.last_checkpoint)
    controller.accept_weights(controller.learners.publish(), force=True)
