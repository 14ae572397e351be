"""Rendezvous: rank 0's TCPStore on a free port, retried on collision.

A store on loopback (every rank on one node) listens on loopback alone: torch's master store
binds every interface whatever host it is given, so rank 0 binds the listening socket itself
and hands it over (``master_listen_fd``).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import socket
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
            fd = None
            if address.startswith("127."):
                fd, try_port = loopback_listener(address, try_port)
            return dist.TCPStore(
                address,
                try_port,
                world_size,
                is_master=True,
                timeout=timeout,
                wait_for_workers=False,
                master_listen_fd=fd,
            )
        except (RuntimeError, OSError) as err:  # DistNetworkError is a RuntimeError
            last = err
            if fd is not None:  # the store never took it
                with contextlib.suppress(OSError):
                    os.close(fd)
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


def loopback_listener(address: str, port: int) -> tuple[int, int]:
    """A TCP socket listening on ``address:port`` (0: the OS chooses), as ``(fd, port)``.

    The descriptor is handed over: the store owns it from then on.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(128)
        bound = sock.getsockname()[1]
    except OSError:
        sock.close()
        raise
    return sock.detach(), bound


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
