"""Progress snapshots, return milestones and the final summary of a controller."""

from __future__ import annotations

import logging
import math
import time

from services.observe.clock import process_start_time

logger = logging.getLogger(__name__)


def snapshot(controller) -> dict:
    """Counters and rates for progress lines and metrics."""
    c = controller.counters
    rates = controller.rates.rates(frames=c.collected_frames, steps=c.optim_steps)
    return {
        "frames": c.collected_frames,
        "total_frames": controller.config.controller.total_frames,
        "frames_per_s": rates["frames"],
        "optim_steps": c.optim_steps,
        "updates_per_s": rates["steps"],
        "model_version": c.model_version,
        "published_version": c.published_version,
        "episodes": c.episodes,
        "episode_return_mean": controller.episodes.return_mean,
        "episode_length_mean": controller.episodes.length_mean,
        "exploration": controller.exploration(),
        "elapsed_s": time.perf_counter() - controller.started_at,
        "generation": c.generation,
        "update_to_data": c.optim_steps / max(c.collected_frames, 1),
        "learner": dict(controller.last_learner_metrics),
        "replay": controller.replay.stats()
        if controller.replay is not None and controller.shards
        else [],
        **controller.loop.state_dict(),
        **(controller.evaluation.snapshot() if controller.evaluation is not None else {}),
    }


def summary(controller) -> dict:
    """The run's final figures (the CLI prints them as its last line of JSON).

    ``startup_s`` is the time from this process's start to the first counted rollout receipt;
    each return milestone carries ``wall_s`` (since training started) and ``process_s``
    (since this process started).
    """
    c = controller.counters
    wall = controller.wall_s or (time.perf_counter() - controller.started_at)
    mean = controller.episodes.return_mean
    return {
        "run_id": controller.run_id,
        "lineage": list(controller.lineage),
        "seed": controller.config.seed,
        "frames": c.collected_frames,
        "transitions": c.transitions,
        "optim_steps": c.optim_steps,
        "model_version": c.model_version,
        "published_version": c.published_version,
        "generation": c.generation,
        "episodes": c.episodes,
        "episode_return_mean": None if math.isnan(mean) else round(mean, 3),
        "wall_s": round(wall, 3),
        "frames_per_s": round(c.collected_frames / max(wall, 1e-9), 1),
        "updates_per_s": round(c.optim_steps / max(wall, 1e-9), 1),
        "collector_failures": c.collector_failures,
        "replay_restarts": c.replay_restarts,
        "replay_items_lost": c.replay_items_lost,
        "env_errors": c.env_errors,
        "nonfinite_steps": c.nonfinite_steps,
        "stopped_early": controller.stop_requested,
        "stop_reason": controller.stop_reason,
        "return_milestones": {f"{k:g}": v for k, v in sorted(controller.milestones.items())},
        "algorithm": controller.config.algorithm,
        "startup_s": None
        if controller.first_rollout_at is None
        else round(controller.first_rollout_at - process_start_time(), 3),
        **controller.loop.state_dict(),
        **(controller.evaluation.summary() if controller.evaluation is not None else {}),
    }


def update_milestones(controller) -> None:
    """Records first crossings of ``return_milestones`` and applies ``stop_return``."""
    ctrl = controller.config.controller
    mean = controller.episodes.return_mean
    if math.isnan(mean) or len(controller.episodes.returns) < ctrl.episode_window:
        return
    for threshold in ctrl.return_milestones:
        if mean >= threshold and threshold not in controller.milestones:
            controller.milestones[threshold] = {
                "frames": controller.counters.collected_frames,
                "wall_s": round(time.perf_counter() - controller.started_at, 3),
                "process_s": round(time.time() - process_start_time(), 3),
            }
    if ctrl.stop_return is not None and mean >= ctrl.stop_return and not controller.stop_requested:
        logger.info("running mean return %.1f reached stop_return; stopping", mean)
        controller.request_stop(f"running mean return {mean:.1f} reached stop_return")
