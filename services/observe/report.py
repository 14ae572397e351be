"""Progress snapshots and the final summary of a run.

Both read a :class:`~services.driver.views.ReportView` of the run (its counters, episode
window and return milestones are in ``run.accounting``, ``services.driver.accounting``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from services.observe.clock import process_start_time
from services.observe.digest import run_digest

if TYPE_CHECKING:
    from services.driver.views import ReportView


def snapshot(run: ReportView) -> dict:
    """Counters and rates for progress lines and metrics."""
    accounting = run.accounting
    c = accounting.counters
    rates = run.rates.rates(frames=c.collected_frames, steps=c.optim_steps)
    return {
        "frames": c.collected_frames,
        "total_frames": run.config.controller.total_frames,
        "frames_per_s": rates["frames"],
        "optim_steps": c.optim_steps,
        "updates_per_s": rates["steps"],
        "model_version": c.model_version,
        "published_version": c.published_version,
        "episodes": c.episodes,
        "episode_return_mean": accounting.episodes.return_mean,
        "episode_length_mean": accounting.episodes.length_mean,
        "exploration": run.exploration(),
        "elapsed_s": accounting.elapsed_s(),
        "generation": c.generation,
        "update_to_data": c.optim_steps / max(c.collected_frames, 1),
        "learner": dict(run.last_learner_metrics),
        "replay": run.replay.stats() if run.replay is not None and run.shards else [],
        **run.elastic.report(),  # sizes: current and target (services.driver.elastic)
        **run.loop.state_dict(),
        **(run.evaluation.snapshot() if run.evaluation is not None else {}),
    }


def summary(run: ReportView) -> dict:
    """The run's final figures (the CLI prints them as its last line of JSON).

    ``startup_s`` is the time from this process's start to the first counted rollout receipt;
    each return milestone carries ``wall_s`` (since training started) and ``process_s``
    (since this process started).
    """
    accounting = run.accounting
    c = accounting.counters
    wall = run.wall_s or accounting.elapsed_s()
    mean = accounting.episodes.return_mean
    first_rollout_at = accounting.first_rollout_at
    return {
        "run_id": run.run_id,
        "lineage": list(run.lineage),
        "seed": run.config.seed,
        "frames": c.collected_frames,
        "transitions": c.transitions,
        "optim_steps": c.optim_steps,
        "model_version": c.model_version,
        "published_version": c.published_version,
        "generation": c.generation,
        "episodes": c.episodes,
        "episode_return_mean": None if math.isnan(mean) else round(mean, 3),
        "external_return_mean": _rounded(accounting.external_episodes.return_mean),
        "wall_s": round(wall, 3),
        "frames_per_s": round(c.collected_frames / max(wall, 1e-9), 1),
        "updates_per_s": round(c.optim_steps / max(wall, 1e-9), 1),
        "collector_failures": c.collector_failures,
        "replay_restarts": c.replay_restarts,
        "replay_items_lost": c.replay_items_lost,
        "env_errors": c.env_errors,
        "nonfinite_steps": c.nonfinite_steps,
        "checkpoint_failures": c.checkpoint_failures,
        "invalid_actions": c.invalid_actions,
        "stopped_early": run.stop_requested,
        "stop_reason": run.stop_reason,
        "return_milestones": {f"{k:g}": v for k, v in sorted(accounting.milestones.items())},
        "algorithm": run.config.algorithm,
        "startup_s": None
        if first_rollout_at is None
        else round(first_rollout_at - process_start_time(), 3),
        **run.loop.state_dict(),
        **run_digest(run.learners, run.shards),
        **(run.evaluation.summary() if run.evaluation is not None else {}),
    }


def _rounded(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 3)
