"""Consistent cuts and ordered restores of a running job (driver side).

Save (:func:`save_cut`): the controller first drains its in-flight rollouts and learner round
(counting their receipts), then the collectors' pause barrier holds, then in parallel every
replay shard dumps its files, every collector returns its state and every learner rank returns
its state; the driver writes those and its own counters, then the manifest, then resumes.

Restore (:func:`restore_services`, :func:`restore_learners`): replay shards, then collectors,
then driver counters, then learners as a new generation, then a forced weight publication;
collection resumes when the loop starts. A checkpoint resumes at any size (#28): replay items
are re-sharded (``replay.persist.reshard``), any rank's learner state serves every new rank with RNG
streams derived per new rank (``learner.ranks.resize``), and another fleet of collectors starts
fresh with seeds derived from ``(seed, index, generation)``; frames, steps and versions continue
from the driver's counters.

Files of a checkpoint: ``replay-<i>/`` (written by each shard itself), ``collector-<i>.json/.npz``,
``learner-<rank>.pt`` (``torch.load(weights_only=True)``), ``driver.json``, ``config.json``.

Disk faults (:func:`write_failed`): an ``OSError`` while writing (ENOSPC, EIO, a directory that
refuses) removes the staging directory, resumes the run and becomes a
:class:`CheckpointWriteError` naming the path; the controller logs and counts it
(``relayrl_checkpoint_failures_total``) and goes on after a periodic cut, while a final
checkpoint that cannot be written ends the run with exit code 1. The newest valid checkpoint
stays as it was.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from replay.health import ShardUnavailableError
from replay.persist.npyio import CheckpointError
from services.checkpoints.resume import PINNED_FIELDS, check_compatible, resolve_resume
from services.checkpoints.statefile import load_state, save_state
from services.checkpoints.store import (
    CheckpointStore,
    CheckpointWriteError,
    read_json,
    write_json,
)

if TYPE_CHECKING:
    from services.driver.views import CutView, DrainView

logger = logging.getLogger(__name__)

__all__ = [
    "PINNED_FIELDS",
    "CheckpointWriteError",
    "check_compatible",
    "checkpoint_now",
    "drain",
    "recover_learners",
    "resolve_resume",
    "restore_learners",
    "restore_services",
    "save_cut",
    "write_failed",
]


def write_failed(store: CheckpointStore, err: OSError) -> CheckpointWriteError:
    """The error a failed write becomes: the file or directory it names, and why.

    A replay shard's ``OSError`` arrives wrapped by Ray; its cause names the shard's file.
    """
    cause = getattr(err, "cause", None)
    cause = cause if isinstance(cause, OSError) else err
    why = cause.strerror or str(cause)
    if cause.filename:
        why = f"{cause.filename}: {why}"
    return CheckpointWriteError(f"checkpoint under {store.root} not written: {why}")


def checkpoint_now(controller: CutView) -> Path | None:
    """The controller's ``checkpoint()``: a cut now, external writes held and counted.

    Returns None when checkpoints are off or the cut is skipped (a replay shard is down).

    Raises:
        CheckpointWriteError: The disk refused the checkpoint (logged with the path and
            counted; the staging directory is removed).
    """
    if controller.checkpoints is None:
        return None
    controller.recovery.before_cut()  # no cut captures a restarted shard before its refill
    try:
        with controller.inbox.barrier(controller):  # gRPC: external writes held and counted
            return save_cut(controller, controller.checkpoints)
    except ShardUnavailableError as err:  # the cut would miss a shard: the run goes on
        logger.warning("checkpoint skipped: %s", err)
        return None
    except OSError as err:  # disk full, I/O error: logged and counted, the caller decides
        failure = write_failed(controller.checkpoints, err)
        counters = controller.counters
        counters.checkpoint_failures += 1
        logger.error("%s (checkpoint failures: %d)", failure, counters.checkpoint_failures)
        controller.emit("checkpoint_failed", failure)
        raise failure from err
    finally:
        controller.recovery.after_cut()


def drain(controller: DrainView) -> None:
    """Counts every in-flight rollout and finishes the in-flight learner round."""
    while controller.inflight or controller.pending_round is not None:
        controller.wait_and_process(timeout=controller.config.controller.log_interval_s)


def save_cut(controller: CutView, store: CheckpointStore) -> Path:
    """Writes a consistent checkpoint of the running job and returns its directory."""
    started = time.perf_counter()
    drain(controller)
    learners, collectors, replay = controller.learners, controller.collectors, controller.replay
    assert learners is not None and collectors is not None and replay is not None  # set up
    learners.flush_replay()  # the learners' priority updates belong to the cut
    # A collector Ray is restarting must be back: its state belongs to the cut.
    collectors.wait_alive(controller.config.collector.rollout_timeout_s)
    collectors.pause()
    staging = None
    try:
        staging = store.stage(controller.counters.collected_frames)
        with ThreadPoolExecutor(max_workers=3) as pool:
            replay_dump = pool.submit(replay.dump, staging)
            collector_states = pool.submit(collectors.state_dicts)
            learner_states = pool.submit(learners.state_dicts)
            for i, state in enumerate(collector_states.result()):
                save_state(staging / f"collector-{i}", state)
            for rank, state in enumerate(learner_states.result()):
                save_torch(staging / f"learner-{rank}.pt", state)
            replay_files = replay_dump.result()
        counters = dataclasses.asdict(controller.counters)
        write_json(staging / "driver.json", driver_state(controller))
        write_json(staging / "config.json", controller.config.to_dict())
        path = store.commit(
            staging,
            config_digest=controller.config.digest(),
            counters={**counters, "replay_shards": len(replay_files)},
        )
    except BaseException:
        if staging is not None:
            store.abort(staging)
        raise
    finally:
        collectors.resume()
    seconds = time.perf_counter() - started
    logger.info("checkpoint %s written in %.2fs", path, seconds)
    controller.last_checkpoint = path
    controller.emit("checkpoint", path, seconds)
    return path


def save_torch(path: Path, state: dict) -> None:
    """``torch.save`` whose disk errors are ``OSError``s naming the file.

    torch's own writer reports a full disk as a ``RuntimeError`` without the path; serialized
    in memory first, the file is written by Python's I/O.
    """
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with path.open("wb") as f:
        f.write(buffer.getbuffer())


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
    if controller.checkpoints is not None:  # a resumed run rotates its predecessors' too
        controller.checkpoints.owners.update(controller.lineage)
    controller.cadence.restore(controller.counters.collected_frames)


def saved_sizes(checkpoint: Path) -> dict[str, int]:
    """The sizes a checkpoint was written at: ``collectors``, ``envs``, ``shards``, ``world_size``.

    Read from its files (the driver's config may have been resized live before the cut).
    """
    config = read_json(checkpoint / "config.json")
    return {
        "collectors": len(list(checkpoint.glob("collector-*.json"))),
        "envs": int(config.get("collector", {}).get("envs_per_collector", 0)),
        "shards": len([p for p in checkpoint.glob("replay-*") if p.is_dir()]),
        "world_size": len(list(checkpoint.glob("learner-*.pt"))),
    }


def load_learner_states(checkpoint: Path, world_size: int | None = None) -> list[dict]:
    """Reads every rank's state with ``weights_only=True`` (default: every saved rank).

    Raises:
        CheckpointError: Naming an unreadable file.
    """
    if world_size is None:
        world_size = saved_sizes(checkpoint)["world_size"]
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
    collectors, replay = controller.collectors, controller.replay
    assert collectors is not None and replay is not None  # set up
    replay.load(checkpoint)  # re-sharded when the shard count differs
    saved, cfg = saved_sizes(checkpoint), controller.config.collector
    if (saved["collectors"], saved["envs"]) == (len(collectors), cfg.envs_per_collector):
        states = [load_state(checkpoint / f"collector-{i}") for i in range(saved["collectors"])]
        # Positions, not ids: a fleet resized live was saved as its live collectors, in order.
        states = [{**state, "collector_id": i} for i, state in enumerate(states)]
        collectors.load_state_dicts(states)
    else:  # another fleet: fresh collectors, seeded by (seed, index, generation), new writer ids
        logger.info(
            "resuming %d collectors x %d envs from a checkpoint of %d x %d: collectors start "
            "fresh (generation %d seeds)",
            len(collectors),
            cfg.envs_per_collector,
            saved["collectors"],
            saved["envs"],
            controller.counters.generation,
        )
    driver = read_json(checkpoint / "driver.json")
    load_driver_state(controller, driver)
    return driver


def restore_learners(controller: CutView, checkpoint: Path) -> int:
    """Loads the learner states into the (new generation) group; returns the version."""
    states = load_learner_states(checkpoint)  # any saved world size (learner.ranks.resize)
    assert controller.learners is not None  # started
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
    assert controller.learners is not None  # set up
    controller.learners.shutdown()
    controller.counters.generation += 1
    controller.learners = controller.start_learners()
    restore_learners(controller, controller.last_checkpoint)
    controller.accept_weights(controller.learners.publish(), force=True)
