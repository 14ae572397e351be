"""The run's ``digest``: one string that says whether two runs ended in the same bits.

It is the SHA-256 of the learner's state digest (rank 0's parameters and buffers of every
network, optimizer and scheduler state, model version: ``learner.determinism.state_digest``)
and each replay shard's contents digest in shard order (``replay.digest.table_digest``). Every
run's summary carries it (taken once, after training, in every shard at once, so it costs no
frames per second; its time is in ``docs/determinism.md``) with ``digest_parts``, the parts it was
made of, to see which one differs. Two deterministic runs (``run.deterministic``) of the same config
and seed give the same digest; two default runs almost never do.
"""

from __future__ import annotations

import hashlib
import json
import logging

import ray

logger = logging.getLogger(__name__)

DIGEST_TIMEOUT_S = 600.0


def combine(parts: dict) -> str:
    """The SHA-256 of the parts' canonical JSON.

    Examples:
        >>> a = combine({"learner": "ab", "replay": ["cd"]})
        >>> a == combine({"replay": ["cd"], "learner": "ab"})
        True
    """
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def run_digest(learners, shards) -> dict:
    """``{"digest": str | None, "digest_parts": {...}}`` of a run whose actors are up.

    None when the learners or shards are gone, failed or do not answer (logged): a digest never
    fails a run's summary.
    """
    if learners is None or not shards:
        return {"digest": None, "digest_parts": None}
    try:
        parts = {
            "learner": learners.digest(),
            "replay": ray.get([s.digest.remote() for s in shards], timeout=DIGEST_TIMEOUT_S),
        }
    except (ray.exceptions.RayError, TimeoutError, RuntimeError) as err:  # a failed group too
        logger.warning("no digest: %s", err)
        return {"digest": None, "digest_parts": None}
    return {"digest": combine(parts), "digest_parts": parts}
