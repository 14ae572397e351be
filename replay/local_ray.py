"""The local Ray every benchmark and the tests start: :func:`init_local_ray`.

``python -m replay.bench``, ``collector.bench``, ``learner.bench``, ``learner.gpu_check``, the
``services.bench`` subcommands and the tests' ``ray_cluster`` fixture all run on a fresh
single-machine cluster: started here (``address="local"``: never joining a ``ray start``
cluster found on the machine, whose head may be gone), bound to loopback, in namespace
``relayrl``, without the dashboard, with workers that import the same checkout as the driver
(``PYTHONPATH`` in the job's runtime env: an editable install may point elsewhere).
``python -m services.train`` starts its own embedded Ray instead
(``services.run.embedded.init_ray``: logical CPUs sized to the run, the dashboard on request,
its own process group).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray

# The checkout holding the four packages (workers import them from here).
ROOT = Path(__file__).resolve().parents[1]


def local_ray_options(num_cpus: int | None = 8, **overrides: Any) -> dict[str, Any]:
    """The keyword arguments :func:`init_local_ray` passes to ``ray.init`` besides the address.

    Args:
        num_cpus: Logical CPUs (actors mostly wait, so more than the machine's cores is fine);
            None lets Ray count the machine's.
        **overrides: Further ``ray.init`` arguments, replacing the defaults of the same name
            (``log_to_driver=True``, ``object_store_memory=...``, ``_system_config=...``).

    Examples:
        >>> options = local_ray_options(4, log_to_driver=True)
        >>> options["num_cpus"], options["namespace"], options["log_to_driver"]
        (4, 'relayrl', True)
        >>> options["runtime_env"]["env_vars"]["PYTHONPATH"] == str(ROOT)
        True
    """
    return {
        "num_cpus": num_cpus,
        "include_dashboard": False,
        "namespace": "relayrl",
        "_node_ip_address": "127.0.0.1",
        "log_to_driver": False,
        "runtime_env": {"env_vars": {"PYTHONPATH": str(ROOT)}},
        **overrides,
    }


def init_local_ray(num_cpus: int | None = 8, **overrides: Any):
    """Starts a fresh local Ray for a benchmark or the tests; returns ``ray.init``'s context.

    Args:
        num_cpus: Logical CPUs; None lets Ray count the machine's.
        **overrides: Further ``ray.init`` arguments (see :func:`local_ray_options`).

    Examples:
        >>> init_local_ray(num_cpus=4, _system_config={"worker_niceness": 0})  # doctest: +SKIP
        >>> ray.shutdown()  # doctest: +SKIP
    """
    return ray.init(address="local", **local_ray_options(num_cpus, **overrides))
