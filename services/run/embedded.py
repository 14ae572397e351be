"""The embedded local Ray a run starts (:func:`init_ray`), its processes out of the driver's group.

:func:`init_ray` connects to ``RAY_ADDRESS`` when set, else starts a local Ray on loopback sized
to the runs' actors (``services.train``, ``services.sweep`` and the Python API's ``Trainer``;
a Ray the caller already started is used as it is).

A signal sent to a whole process group (Ctrl-C in a terminal, ``kill -TERM -<pgid>``, some
process supervisors) reaches every process in it. Ray starts its node processes (GCS, raylet,
log monitor) as children of the driver, in the driver's group, so the same SIGTERM that asks
the driver for a clean stop also kills the cluster under it: the final checkpoint can no longer
be cut, and ``ray.shutdown`` then waits 60 s for a GCS that is gone.

:func:`own_process_group` starts those processes in a session of their own while
``ray.init`` runs, so a group signal reaches the driver alone; the driver then stops at the
next boundary, cuts its final checkpoint and shuts the cluster down itself. This is only done
where the kernel ties the children's lives to the driver's (Linux ``PR_SET_PDEATHSIG``, which
Ray sets up), so a driver that dies still takes its cluster with it; Ray does the same on
Windows (``CREATE_NEW_PROCESS_GROUP``).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.config import RunConfig


@contextlib.contextmanager
def own_process_group() -> Iterator[bool]:
    """While active, Ray's node processes start in their own session (see the module docstring).

    Yields:
        Whether the processes are detached (False where the kernel offers no fate-sharing).
    """
    from ray._private import services, utils

    if not utils.detect_fate_sharing_support() or not hasattr(services, "ConsolePopen"):
        yield False
        return
    original = services.ConsolePopen.__init__

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        kwargs.setdefault("start_new_session", True)
        original(self, *args, **kwargs)

    services.ConsolePopen.__init__ = init
    try:
        yield True
    finally:
        services.ConsolePopen.__init__ = original


def logical_cpus(config: RunConfig) -> float:
    """Logical CPUs the run's actors ask for."""
    c = config
    return (
        c.collector.fleet_size * c.collector.num_cpus
        + c.replay.num_shards * c.replay.num_cpus
        + c.learner.world_size * c.learner.resources_per_rank.get("CPU", 0)
        + (c.evaluation.num_cpus if c.evaluation.enabled else 0)
    )


def init_ray(*configs: RunConfig, extra_cpus: float = 0.0) -> None:
    """Connects to ``RAY_ADDRESS`` if set, else starts an embedded local Ray on loopback.

    The embedded cluster declares at least as many logical CPUs as the actors of all
    ``configs`` (the runs that will share it) ask for, plus ``extra_cpus`` (a tune search's
    trial actors), so a small machine runs the default job
    or a sweep (the OS shares the real cores). Its dashboard starts only with
    ``ray.dashboard: true`` (a run does not use it, and it adds to every start-up).
    """
    import ray

    from collector.config import INLINE_WRITE_ENV
    from replay.local_ray import agent_port_chosen_by_os, loopback_node
    from services.run.raytools import log_cluster

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        log_cluster(ray.init(namespace="relayrl", log_to_driver=True))
        return
    gpus = sum(c.learner.world_size * c.learner.resources_per_rank.get("GPU", 0) for c in configs)
    # Every process of the embedded cluster inherits the collectors' inline-write limit, so
    # collectors start in prestarted workers instead of dedicated ones (see collector.manage.group).
    os.environ.update(INLINE_WRITE_ENV)
    # A signal to the driver's process group spares the cluster; another cluster on the machine
    # holding Ray's fixed agent port does not delay the start; every socket of the node binds
    # loopback (replay.local_ray).
    with own_process_group(), agent_port_chosen_by_os(), loopback_node():
        context = ray.init(
            address="local",  # never attach to a `ray start` cluster found on this machine
            num_cpus=max(
                os.cpu_count() or 1,
                math.ceil(sum(logical_cpus(c) for c in configs) + extra_cpus),
            ),
            num_gpus=gpus or None,
            include_dashboard=any(c.ray.dashboard for c in configs),
            dashboard_host="127.0.0.1",
            namespace="relayrl",
            _node_ip_address="127.0.0.1",
        )
    log_cluster(context)  # operators point `ray list actors`, `ray status` at the run
