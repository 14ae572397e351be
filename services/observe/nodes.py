"""The ``node`` label metrics give a Ray node: ``<ip>/<first 8 hex digits of its id>``.

Examples:
    >>> node_labels([None, None])  # nodes not known yet
    ['', '']
"""

from __future__ import annotations

import contextlib


def node_labels(node_ids: list[str | None]) -> list[str]:
    """The ``node`` label of each Ray node id: ``<ip>/<first 8 hex digits>`` (or the id)."""
    addresses: dict[str, str] = {}
    if any(node_ids):
        import ray

        with contextlib.suppress(Exception):  # labels must never stop a run
            addresses = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    return [
        f"{addresses[node]}/{node[:8]}" if node in addresses else (node or "") for node in node_ids
    ]
