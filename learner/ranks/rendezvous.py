"""Rendezvous: rank 0's TCPStore on a free port, retried on collision."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence

import ray
import torch.distributed as dist

logger = logging.getLogger(__name__)


def open_store(
    address: str, port: int, world_size: int, *, timeout_s: float, attempts: int = 3
) -> dist.TCPStore:
    """Opens the master store on ``address``; ``port`` 0 lets the OS choose.

    A requested port that is taken (or any failed opening) is retried on OS-chosen ports, up to
    ``attempts`` openings in all.

    Args:
        address: Address the store listens on (rank 0's node address, or loopback).
        port: Requested port, or 0.
        world_size: Number of ranks that will join.
        timeout_s: Store timeout for joins and lookups.
        attempts: Openings tried before giving up.

    Returns:
        The open store (``store.port`` is the port actually bound).

    Raises:
        RuntimeError: If every attempt failed, with the last error.
    """
    timeout = datetime.timedelta(seconds=timeout_s)
    last: Exception | None = None
    for attempt in range(attempts):
        try_port = port if attempt == 0 else 0
        try:
            return dist.TCPStore(
                address,
                try_port,
                world_size,
                is_master=True,
                timeout=timeout,
                wait_for_workers=False,
            )
        except (RuntimeError, OSError) as err:  # DistNetworkError is a RuntimeError
            last = err
            logger.warning(
                "rendezvous: store on %s:%d failed (attempt %d/%d): %s",
                address,
                try_port,
                attempt + 1,
                attempts,
                err,
            )
    raise RuntimeError(
        f"rendezvous: could not open a store on {address} in {attempts} attempts: {last}"
    )


def join_ranks(ranks: Sequence[ray.actor.ActorHandle], config) -> tuple[str, int]:
    """Rendezvous of the rank actors: rank 0 opens the store, then every rank joins at once.

    The store listens on rank 0's node address, or on loopback when every rank is on one node.
    Each step waits at most ``config.setup_timeout_s``.

    Returns:
        The store's ``(address, port)``.
    """
    timeout = config.setup_timeout_s
    addresses = ray.get([r.node_address.remote() for r in ranks], timeout=timeout)
    address = "127.0.0.1" if len(set(addresses)) == 1 else addresses[0]
    port = ray.get(ranks[0].open_store.remote(address, config.rendezvous_port), timeout=timeout)
    ray.get([r.join.remote(address, port) for r in ranks], timeout=timeout)
    return address, port
