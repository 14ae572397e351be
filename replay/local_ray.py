"""The local Ray every benchmark and the tests start: :func:`init_local_ray`.

``python -m replay.bench``, ``collector.bench``, ``learner.bench``, ``learner.gpu.check``, the
``services.bench`` subcommands and the tests' ``ray_cluster`` fixture all run on a fresh
single-machine cluster: started here (``address="local"``: never joining a ``ray start``
cluster found on the machine, whose head may be gone), bound to loopback, in namespace
``relayrl``, without the dashboard, with workers that import the same checkout as the driver
(``PYTHONPATH`` in the job's runtime env: an editable install may point elsewhere).
``python -m services.train`` starts its own embedded Ray instead
(``services.run.embedded.init_ray``: logical CPUs sized to the run, the dashboard on request,
its own process group).
Both let the OS choose the node's dashboard-agent port (:func:`agent_port_chosen_by_os`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
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
    with agent_port_chosen_by_os():
        return ray.init(address="local", **local_ray_options(num_cpus, **overrides))


@contextlib.contextmanager
def agent_port_chosen_by_os() -> Iterator[None]:
    """While active, a Ray node started here lets the OS choose its dashboard agent's HTTP port.

    Ray's default is the fixed port 52365. Where another Ray cluster on the machine holds it (a
    second run, a test suite, another user), the new node's agent retries the bind for about
    3 s, then goes on without its HTTP server, and the raylet waits for the agent meanwhile, so
    every such start took 3 s longer. ``ray.init`` has no argument for the port, so the
    default of Ray's ``RayParams`` is replaced while the node starts.

    Examples:
        >>> from ray._private.parameter import RayParams
        >>> with agent_port_chosen_by_os():
        ...     RayParams().dashboard_agent_listen_port
        0
        >>> RayParams().dashboard_agent_listen_port
        52365
    """
    from ray._private import parameter

    original = parameter.RayParams.__init__

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        kwargs.setdefault("dashboard_agent_listen_port", 0)
        original(self, *args, **kwargs)

    parameter.RayParams.__init__ = init
    try:
        yield
    finally:
        parameter.RayParams.__init__ = original
