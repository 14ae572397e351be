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
Both let the OS choose the node's dashboard-agent port (:func:`agent_port_chosen_by_os`) and
keep every socket of the node on loopback (:func:`loopback_node`).
"""

from __future__ import annotations

import contextlib
import functools
import os
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
    with agent_port_chosen_by_os(), loopback_node():
        return ray.init(address="local", **local_ray_options(num_cpus, **overrides))


# Ray's switch for single-machine clusters (meant for Windows and macOS, honoured everywhere).
SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def loopback_node() -> Iterator[None]:
    """While active, a Ray node started here binds every socket it listens on to loopback.

    ``_node_ip_address="127.0.0.1"`` alone does not: ``ray.init`` replaces a loopback address
    with the host's routable one (``services.resolve_ip_for_localhost``) unless Ray runs as a
    single-machine cluster, and its GCS, raylet and workers then listen on ``::``, its agents
    on ``0.0.0.0`` and the host's address. With the node address left at ``127.0.0.1`` they
    bind ``127.0.0.1`` (Ray's C++ servers bind loopback only when the node's address is
    loopback). The switch is set for this process while the node starts and in the
    environment its processes, started meanwhile, inherit; such a node cannot take other
    machines' nodes, which an embedded cluster never does.

    Examples:
        >>> from ray._private import ray_constants
        >>> with loopback_node():
        ...     ray_constants.ENABLE_RAY_CLUSTER, os.environ[SINGLE_MACHINE_ENV]
        (False, '0')
    """
    from ray._private import ray_constants

    original, inherited = ray_constants.ENABLE_RAY_CLUSTER, os.environ.get(SINGLE_MACHINE_ENV)
    ray_constants.ENABLE_RAY_CLUSTER = False
    os.environ[SINGLE_MACHINE_ENV] = "0"
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = original
        if inherited is None:
            os.environ.pop(SINGLE_MACHINE_ENV, None)
        else:
            os.environ[SINGLE_MACHINE_ENV] = inherited


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
