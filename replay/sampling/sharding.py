"""How a sampled batch is split across shards (pure functions over the shards' last replies).

Each shard's reply carries ``info``: its ``size`` and ``sampler``, plus ``mass`` and
``min_mass`` (prioritized: sum and minimum of ``priority ** alpha``) or ``remaining`` (FIFO:
items left in its current pass).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np
import ray

from replay.sampling.samplers import EmptyReplayError


@dataclasses.dataclass
class PendingSample:
    """A sample requested from every shard and not yet collected.

    Attributes:
        batch_size: Items per batch.
        num_batches: Batches requested together (``batch_size * num_batches`` items in all).
        counts: Items asked of each shard.
        shares: Probability with which each draw went to each shard (uniform, prioritized).
        refs: Per-shard references to ``(batch, info)`` replies.
    """

    batch_size: int
    num_batches: int
    counts: np.ndarray
    shares: np.ndarray
    refs: list[ray.ObjectRef]


def split_group(
    batch: dict[str, np.ndarray], num_batches: int, rng: np.random.Generator | None
) -> list[dict[str, np.ndarray]]:
    """Splits one fetched group into ``num_batches`` equal batches.

    With ``rng``, the rows are permuted first: the group is i.i.d. draws concatenated shard by
    shard, and a random partition of i.i.d. draws is i.i.d. draws again. Without (FIFO), the
    rows keep their order.
    """
    if num_batches == 1 or not batch:
        return [batch]
    size = len(batch["index"])
    order = rng.permutation(size) if rng is not None else np.arange(size)
    bounds = np.linspace(0, size, num_batches + 1).astype(np.int64)
    return [{k: v[order[lo:hi]] for k, v in batch.items()} for lo, hi in itertools.pairwise(bounds)]


def shares_of(infos: Sequence[dict]) -> np.ndarray:
    """Probability that one draw goes to each shard: proportional to size or priority mass.

    Raises:
        EmptyReplayError: If no shard has anything to sample.
    """
    if infos[0].get("sampler") == "prioritized":
        weights = np.array([info.get("mass", 0.0) if info["size"] else 0.0 for info in infos])
    else:
        weights = np.array([info["size"] for info in infos], dtype=np.float64)
    total = weights.sum()
    if total <= 0:
        raise EmptyReplayError("cannot sample: every replay shard is empty")
    return weights / total


def largest_remainder(n: int, weights: np.ndarray) -> np.ndarray:
    """Splits ``n`` into integers proportional to non-negative integer ``weights``.

    Exact integer arithmetic: each part is the floor of its quota, and the leftover units go to the
    largest fractional parts (ties: lowest index). No part exceeds its weight when
    ``n <= sum(weights)``.

    Examples:
        >>> largest_remainder(10, np.array([1, 1, 1])).tolist()
        [4, 3, 3]
    """
    weights = np.asarray(weights, dtype=np.int64)
    total = int(weights.sum())
    if n == 0 or total == 0:
        return np.zeros(len(weights), dtype=np.int64)
    scaled = n * weights
    counts, fractions = scaled // total, scaled % total
    leftover = n - int(counts.sum())
    order = np.argsort(-fractions, kind="stable")
    counts[order[:leftover]] += 1
    return counts


def fifo_split(batch_size: int, infos: Sequence[dict], inflight: np.ndarray) -> np.ndarray:
    """Items to ask of each FIFO shard so that shard passes end together.

    The batch first takes what is left of every shard's current pass (in proportion, never more
    than a shard has left), then splits the rest in proportion to the sizes (those items come
    from the next passes). ``inflight`` counts items already requested but not yet replied to,
    which the shards' reported ``remaining`` does not reflect yet.
    """
    sizes = np.array([info["size"] for info in infos], dtype=np.int64)
    remaining = np.array([info.get("remaining", 0) for info in infos], dtype=np.int64) - inflight
    # Requests in flight beyond a pass's end have started the next pass of ``size`` items.
    wrapped = np.where(sizes > 0, remaining % np.maximum(sizes, 1), 0)
    remaining = np.where(remaining < 0, wrapped, remaining)
    counts = largest_remainder(min(batch_size, int(remaining.sum())), remaining)
    rest = batch_size - int(counts.sum())
    if rest > 0:
        counts += largest_remainder(rest, sizes)
    return counts


def merge_replies(
    replies: Sequence[tuple[dict[str, np.ndarray], dict] | None],
    shares: np.ndarray,
    extra: tuple[dict[str, np.ndarray], float] | None = None,
) -> tuple[dict[str, np.ndarray], float]:
    """Concatenates the shards' parts of one sample: ``(batch, smallest draw probability)``.

    Each part gets its ``"shard"``, and its in-shard ``"probability"`` becomes the probability
    over the whole service (times the shard's share). The smallest draw probability is that of
    the least likely item of any prioritized shard that was asked (``inf`` when none was).

    Args:
        replies: Per shard, its ``(part, info)`` reply, or None if it gave none.
        shares: Probability with which each draw went to each shard.
        extra: A batch drawn again for the shards that gave no reply, with its smallest
            draw probability.

    Returns:
        The batch (``{}`` if empty); FIFO rows ordered by pass (a fetch may cross a pass's end).
    """
    parts, minima = [], [np.inf]
    for shard, reply in enumerate(replies):
        if reply is None:
            continue
        part, info = reply
        if info["sampler"] == "prioritized" and info["size"] and shares[shard] > 0:
            minima.append(shares[shard] * info["min_mass"] / info["mass"])
        if part:
            part = {**part, "shard": np.full(len(part["index"]), shard, dtype=np.int64)}
            if "probability" in part:
                part["probability"] = part["probability"] * shares[shard]
            parts.append(part)
    if extra is not None and extra[0]:
        parts.append(extra[0])
        minima.append(extra[1])
    if not parts:
        return {}, np.inf
    batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    if "fifo_pass" in batch:
        order = np.argsort(batch["fifo_pass"], kind="stable")
        batch = {k: v[order] for k, v in batch.items()}
    return batch, min(minima)
