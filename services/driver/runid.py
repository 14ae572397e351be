"""Run identity: one unique id per run, used for actor names, the run directory and metrics.

A run id is ``<run.name>-<YYYYmmdd-HHMMSS>-<token>``: the human name, the start time, and a
six-character token. Under ``ray job submit`` the token is the tail of the job's submission id
(so ``ray job list`` and the run directory can be matched by eye); otherwise, and for every run
of a sweep (several runs in one job), it is random. Two runs started in the same second on one
machine, or on one cluster, therefore never share actor names, run directories or the ``run``
label of their Prometheus series.

A resumed run gets a new id; the checkpoint's lineage (the ids of the runs it continues) is
kept in the checkpoint and reported in the summary, so a resumed run never collides with a
still-running original.

Examples:
    >>> new_run_id("cartpole", now=0.0, token="a1b2c3")  # doctest: +SKIP
    'cartpole-19700101-000000-a1b2c3'
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time

TOKEN_CHARS = 6
# Set by Ray's job supervisor in the entrypoint's environment (runtime env and metadata).
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def random_token() -> str:
    """Six random lowercase hex characters (about 16.7 M values)."""
    return secrets.token_hex(TOKEN_CHARS // 2)


def job_token() -> str | None:
    """The tail of this process's Ray job submission id, or None outside a submitted job."""
    raw = os.environ.get(JOB_CONFIG_ENV)
    if not raw:
        return None
    try:
        submission_id = json.loads(raw)["metadata"]["job_submission_id"]
    except (ValueError, KeyError, TypeError):
        return None
    tail = re.sub(r"[^A-Za-z0-9]", "", str(submission_id))[-TOKEN_CHARS:].lower()
    return tail if len(tail) == TOKEN_CHARS else None


def new_run_id(name: str, *, now: float | None = None, token: str | None = None) -> str:
    """A run id ``<name>-<YYYYmmdd-HHMMSS>-<token>``.

    Args:
        name: The human part, ``run.name``.

    Keyword Args:
        now: Start time (seconds since the epoch; default: now), in local time.
        token: The suffix; default: the Ray job's token if any, else random.

    Returns:
        The id; it contains no ``/`` or whitespace (it names actors and directories).
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{name}-{stamp}-{token or job_token() or random_token()}"
