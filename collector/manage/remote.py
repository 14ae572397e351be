"""Starting one named Collector actor (``<run>.collector-<i>``), with its threads and options."""

from __future__ import annotations

import ray

from collector.config import INLINE_WRITE_ENV, inherits_inline_writes


def remote_collector(
    run_name: str,
    collector_id: int,
    *args,
    num_cpus: float = 1.0,
    max_restarts: int = 3,
    scheduling_strategy=None,
    **kwargs,
) -> ray.actor.ActorHandle:
    """Starts a named Collector actor ``<run>.collector-<i>`` in namespace ``relayrl``.

    ``args`` and ``kwargs`` are :class:`collector.actor.Collector`'s after ``collector_id``. The
    actor gets its rollout threads (pipelined writes), its control threads, and sends replay
    writes of up to ``INLINE_WRITE_BYTES`` inline (Ray's ``max_direct_call_object_size``, set
    for this actor's process only). ``run_name`` is the run id; ``scheduling_strategy`` (e.g. a
    bundle of the run's placement group) defaults to Ray's.
    """
    from collector.actor import CONCURRENCY_GROUPS, ROLLOUT_CONCURRENCY, Collector  # torch

    actor_cls = ray.remote(
        max_concurrency=ROLLOUT_CONCURRENCY, concurrency_groups=CONCURRENCY_GROUPS
    )(Collector).options(
        name=f"{run_name}.collector-{collector_id}",
        namespace="relayrl",
        num_cpus=num_cpus,
        max_restarts=max_restarts,
        max_task_retries=0,
        runtime_env=None if inherits_inline_writes() else {"env_vars": INLINE_WRITE_ENV},
        scheduling_strategy=scheduling_strategy,
    )
    return actor_cls.remote(collector_id, *args, **kwargs)
