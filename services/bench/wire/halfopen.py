"""The half-open attack of ``python -m services.bench hostile``: headers, never a body."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc


def half_open(address: str, ca: str, args) -> dict:
    """Phase 5: calls with no credential that send their headers and never their body.

    ``--half-open`` each of GetStatus, Stop, GetRoute and health Check (the only call that
    needs no credential) from 4 connections, held for ``--half-open-s`` seconds while the
    poller polls: the credential-less ones must be refused at once, the health checks end at
    the server's receive deadline or are refused beyond their own capacity.
    """
    release = threading.Event()

    def never():
        release.wait(args.half_open_s)
        return
        yield  # a request stream that sends nothing

    credentials = grpc.ssl_channel_credentials(Path(ca).read_bytes())
    channels = [grpc.secure_channel(address, credentials) for _ in range(4)]
    methods = (
        "/relayrl.v1.Control/GetStatus",
        "/relayrl.v1.Control/Stop",
        "/relayrl.v1.Experience/GetRoute",
        "/grpc.health.v1.Health/Check",
    )
    try:
        calls = [
            (method, channels[i % 4].stream_unary(method).future(never(), timeout=120))
            for i, method in enumerate(methods * args.half_open)
        ]
        release.wait(args.half_open_s)  # the attack holds: the poller measures meanwhile
        codes: dict[str, dict[str, int]] = {}
        for method, future in calls:
            error = future.exception(timeout=120)
            name = error.code().name if error is not None else "OK"
            counts = codes.setdefault(method.rsplit("/", 1)[1], {})
            counts[name] = counts.get(name, 0) + 1
    finally:
        release.set()
        for channel in channels:
            channel.close()
    return {"half_open_codes": codes}
