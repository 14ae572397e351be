"""The Ray toolbox on a run: the dashboard and the logged addresses (``ray`` config section).

The embedded local Ray (``services.run.embedded.init_ray``) starts Ray's dashboard on loopback with
``ray.dashboard: true`` (off by default: a run does not use it), so ``ray list actors``,
``ray status``, ``ray memory`` and the dashboard itself can be pointed at a running job. At
start the run logs the cluster's address and the dashboard's URL::

    relayrl: Ray at 127.0.0.1:61379, dashboard http://127.0.0.1:8265
      (try: RAY_AUTH_MODE=token RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray list actors
      --address 127.0.0.1:61379)

The variables in the suggested command are those Ray's tools need to reach this cluster
(:func:`tool_env`).

The dashboard's port is Ray's default 8265; when another cluster holds it, Ray takes the next
free one, so read the URL from the log. Starting the dashboard adds to Ray's start-up
(``docs/benchmarks.md``), which is why it is off unless asked for.
"""

from __future__ import annotations

import dataclasses
import logging
import os

logger = logging.getLogger("relayrl")


@dataclasses.dataclass(frozen=True)
class ClusterAddresses:
    """Where operators point Ray's tools at the run's cluster.

    Attributes:
        address: The cluster's GCS address (``ray status --address``, ``ray list actors
            --address``).
        dashboard: The dashboard's URL (``ray job submit --address``, a browser), or None
            without a dashboard.
    """

    address: str
    dashboard: str | None


def cluster_addresses(context) -> ClusterAddresses:
    """Reads the addresses from the context ``ray.init`` returned."""
    info = getattr(context, "address_info", None) or {}
    address = info.get("gcs_address") or info.get("address") or ""
    url = getattr(context, "dashboard_url", None) or info.get("webui_url") or None
    if url and "://" not in url:
        url = f"http://{url}"
    return ClusterAddresses(address=address, dashboard=url)


def tool_env(address: str) -> dict[str, str]:
    """The environment Ray's command-line tools need to reach the cluster at ``address``.

    A cluster with token authentication (Ray's default for ``ray.init`` since 2.60) answers
    tools only when they send its token (``~/.ray/auth_token`` on this machine) and know to
    send it: ``RAY_AUTH_MODE=token``. A loopback address needs Ray's single-machine switch: the
    tools otherwise replace ``127.0.0.1`` with the host's routable address, where the embedded
    cluster (bound to loopback, ``replay.local_ray.loopback_node``) does not listen, and time
    out waiting for the GCS.

    Examples:
        >>> tool_env("127.0.0.1:6379")["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"]
        '0'
        >>> "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" in tool_env("10.0.0.5:6379")
        False
    """
    from replay.local_ray import SINGLE_MACHINE_ENV

    env = {}
    if os.environ.get("RAY_AUTH_MODE") == "token":
        env["RAY_AUTH_MODE"] = "token"
    if address.rsplit(":", 1)[0] in ("127.0.0.1", "localhost"):
        env[SINGLE_MACHINE_ENV] = "0"
    return env


def log_cluster(context) -> ClusterAddresses:
    """Logs the cluster's address and dashboard URL (once, at start) and returns them."""
    found = cluster_addresses(context)
    prefix = "".join(f"{k}={v} " for k, v in tool_env(found.address).items())
    if found.dashboard:
        logger.info(
            "Ray at %s, dashboard %s (try: %sray list actors --address %s)",
            found.address,
            found.dashboard,
            prefix,
            found.address,
        )
    else:  # the state API behind `ray list` lives in the dashboard
        logger.info("Ray at %s, dashboard off (ray.dashboard: true starts it)", found.address)
    return found
