"""Starting a run's collector group and learner group (the controller's setup).

The controller reserves the services' placement group (``services.driver.placement``), starts
the replay shards (``replay.shard.remote_shards``) and the collectors in it, and meanwhile the
learner group (its own placement group, ``learner/ranks/placement.py``) in a helper thread; a failed
learner generation is replaced by a new group (``services.checkpoints.cut.recover_learners``).
Every actor carries a Ray name in namespace ``relayrl``: ``<run id>.replay-<i>``,
``<run id>.collector-<i>``, ``<run id>.learner-<rank>``.
"""

from __future__ import annotations

from collections.abc import Sequence

from collector.manage.group import CollectorGroup
from collector.sequence_worker import SequenceLayout
from learner.ranks.group import LearnerGroup
from services.config import RunConfig
from services.config.recipes import Algorithm


def start_collectors(
    config: RunConfig,
    run_id: str,
    model_spec,
    algorithm: Algorithm,
    scheduling: Sequence,
    generation: int = 0,
) -> CollectorGroup:
    """Starts the run's collector group, writing to its replay shards by name.

    ``generation`` (a resumed run's) seeds collectors that start fresh at another size.
    """
    cfg = config.collector
    return CollectorGroup(
        run_id,
        cfg.fleet_size,
        cfg.env_id,
        cfg.envs_per_collector,
        model_spec,
        [f"{run_id}.replay-{i}" for i in range(config.replay.num_shards)],
        config.seed,
        num_cpus=cfg.num_cpus,
        max_restarts=cfg.max_restarts,
        vector_mode=cfg.vector_mode,
        env_kwargs=cfg.env_kwargs,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        transform=algorithm.collector_transform(config),
        frame_stack=config.replay.frame_ring,
        action_mask_key=cfg.action_mask_key or None,
        scheduling=scheduling,
        aggregate=cfg.aggregate,
        generation=generation,
        sequences=sequence_layout(config.replay),
        nice=cfg.nice,
    )


def sequence_layout(replay) -> SequenceLayout | None:
    """The collectors' sequences from ``replay.sequence_*`` (None: n-step transitions)."""
    if not replay.sequences:
        return None
    return SequenceLayout(
        replay.sequence_length, replay.sequence_overlap, replay.burn_in, replay.frame_stack
    )


def start_learners(
    config: RunConfig, run_id: str, model_spec, shards: Sequence, generation: int
) -> LearnerGroup:
    """Starts a learner group of ``generation`` sampling from ``shards``."""
    return LearnerGroup(
        run_id,
        config.learner,
        model_spec,
        shards,
        config.seed,
        generation=generation,
        deterministic=config.run.deterministic,
    )
