"""The search itself: Ray, the Tuner (or its restore), the results written to the tune directory.

Called by ``python -m services.tune`` once every argument and config is checked. Uses the Ray
the process is connected to (a test's, a ``ray job submit``'s), else starts an embedded local
Ray sized for the concurrent trials' runs and shuts it down at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import ray

from services.run.embedded import init_ray
from services.search.results import (
    plot_trials,
    read_lineage,
    trial_rows,
    write_best,
    write_trials,
)
from services.search.schedulers import make_scheduler
from services.search.trial import RelayTrial, TrialSpec

logger = logging.getLogger(__name__)
TRIAL_CPUS = 0.25  # the trial actor (the run's driver): it mostly waits on receipts


def trial_resources(config) -> dict:
    """What Tune reserves for a trial's actor: the driver, plus the evaluator it starts.

    Tune places the trial actor in a placement group that captures the tasks and actors it
    starts without a placement of their own: the evaluator is one. Collectors, replay shards
    and learners go to the run's own placement groups, sized from its config.
    """
    return {"cpu": TRIAL_CPUS + (config.evaluation.num_cpus if config.evaluation.enabled else 0)}


def run_search(
    args: argparse.Namespace, search: dict, tune_dir: Path, *, resume: bool, callbacks=None
) -> dict:
    """Runs (or resumes) the search and writes its results; returns the final JSON record."""
    from ray import tune

    config, dims = search["config"], search["dims"]
    fixed = {**search["fixed"], "run.storage": str(tune_dir)}
    if "wandb" in config.metrics.trackers and not config.metrics.wandb.group:
        fixed["metrics.wandb.group"] = tune_dir.name
    spec = TrialSpec(raw=search["raw"], fixed=fixed, tune_dir=str(tune_dir), metric=args.metric)
    concurrent = min(args.max_concurrent or search["trials"], search["trials"])
    if args.scheduler in ("pbt", "pb2") and concurrent < search["trials"]:
        # Tune creates trials as earlier ones end, so exploits only reach the trials running.
        logger.warning(
            "--max-concurrent %d < %d trials: %s's population is the trials running at once, "
            "so they run as separate populations of at most %d",
            concurrent,
            search["trials"],
            args.scheduler,
            concurrent,
        )
    started_ray = not ray.is_initialized()
    if started_ray:
        resources = trial_resources(config)["cpu"]
        init_ray(*[config] * concurrent, extra_cpus=resources * concurrent)
    trainable = tune.with_resources(
        tune.with_parameters(RelayTrial, spec=spec), trial_resources(config)
    )
    experiment = tune_dir / "tune"
    try:
        if resume and tune.Tuner.can_restore(str(experiment)):
            tuner = tune.Tuner.restore(
                str(experiment), trainable=trainable, resume_unfinished=True, resume_errored=True
            )
        else:
            tuner = tune.Tuner(
                trainable,
                param_space={d.key: d.domain() for d in dims},
                tune_config=tune.TuneConfig(
                    metric=args.metric,
                    mode="max",
                    scheduler=make_scheduler(
                        args.scheduler,
                        dims,
                        max_frames=search["max_frames"],
                        perturbation_frames=search["perturbation_frames"],
                    ),
                    num_samples=args.num_samples,
                    max_concurrent_trials=concurrent,
                    reuse_actors=True,  # reset_config: an exploit reuses the receiver's actor
                ),
                run_config=tune.RunConfig(
                    name="tune",
                    storage_path=str(tune_dir),
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=4, checkpoint_at_end=True),
                    verbose=1,
                    callbacks=list(callbacks or []),
                ),
            )
        grid = tuner.fit()
    finally:
        if started_ray:
            ray.shutdown()
    return write_outputs(tune_dir, grid, args.metric, search["max_frames"], dims)


def saved_statuses(experiment: Path) -> dict[str, str]:
    """Each trial's status in Tune's newest saved experiment state (``RUNNING`` if interrupted).

    The in-memory trials of an interrupted search read ``TERMINATED`` once Tune has stopped
    them; the state Tune saved at the interrupt keeps what a ``--resume`` will continue.
    """
    files = sorted(experiment.glob("experiment_state-*.json"))  # named by start time
    if not files:
        return {}
    statuses = {}
    for trial_json, _ in json.loads(files[-1].read_text())["trial_data"]:
        trial = json.loads(trial_json)
        statuses[trial["trial_id"]] = trial.get("status", "")
    return statuses


def write_outputs(tune_dir: Path, grid, metric: str, max_frames: int, dims) -> dict:
    """``trials.csv``, ``best.json``, the plot; returns the final JSON record."""
    results = list(grid)
    trials = grid._experiment_analysis.trials  # aligned with the results (ResultGrid)
    ids = [t.trial_id for t in trials]
    lineage = read_lineage(tune_dir)
    (tune_dir / "lineage.jsonl").touch()
    rows = trial_rows(results, ids, metric, max_frames, [d.key for d in dims])
    trials_csv = write_trials(tune_dir, rows, lineage)
    best = write_best(tune_dir, rows, metric)
    plot = plot_trials(tune_dir, results, ids, metric, lineage)
    statuses = saved_statuses(tune_dir / "tune")
    interrupted = any(s not in ("TERMINATED", "ERROR") for s in statuses.values())
    pairs = zip(rows, results, strict=True)
    errors = {row["trial_id"]: str(result.error) for row, result in pairs if result.error}
    return {
        "dir": str(tune_dir),
        "trials": len(rows),
        "stopped_early": 0 if interrupted else sum(r["stopped_early"] for r in rows),
        "exploits": len(lineage),
        "best_return": None if best is None else best["value"],
        "best_run_dir": None if best is None else best["run_dir"],
        "best_checkpoint": None if best is None else best["checkpoint"],
        "best_trial": None if best is None else best["trial_id"],
        "metric": metric,
        "trials_csv": str(trials_csv),
        "lineage": str(tune_dir / "lineage.jsonl"),
        "best_json": str(tune_dir / "best.json"),
        "plot": str(plot),
        "interrupted": interrupted,
        "errors": errors,
    }
