"""Learner state for another world size: one replica's state, fresh RNG streams per new rank.

DDP keeps its replicas identical: every rank holds the same parameters (policy, other networks,
target networks), the same optimizer, LR-scheduler and grad-scaler state and the same version,
because every step applies the same all-reduced gradients and every decision that depends on
them (the non-finite guard, the fp16 scaler's update, a delayed actor step) is taken alike on
all ranks. What differs between ranks is only randomness and transient sampling state:

* ``rng``: each rank's torch (and CUDA) generator and its replay client's split generator;
* prefetched batches in the rank's sampler and held priority updates (never in a state: a rank
  drains and resets them around a restore);
* ``meta``: the rank's index and world size.

So rank 0's state serves every new rank, and each new rank gets RNG streams of its own,
derived from the run seed, the new group's generation and the new rank in the style of
:mod:`replay.sampling.streams` (component ``shuffle``, index the rank, key ``(RESIZE, part)``): no
two ranks share a stream, and a later resume (a higher generation) gets fresh ones. A state set of
the group's own world size passes through unchanged (bit-exact RNG continuation).

Examples:
    >>> from learner.core import LearnerCore
    >>> from learner.config import LearnerConfig
    >>> from collector.networks.q_mlp import ModelSpec
    >>> core = LearnerCore(ModelSpec(4, 2), LearnerConfig())
    >>> saved = core.state_dict()
    >>> saved["rng"]["replay"] = np.random.default_rng(0).bit_generator.state
    >>> saved["meta"] = {"rank": 0, "world_size": 1}
    >>> states = states_for_world_size([saved], 3, seed=7, generation=1)
    >>> [(s["meta"]["rank"], s["meta"]["world_size"]) for s in states]
    [(0, 3), (1, 3), (2, 3)]
    >>> torch.equal(states[1]["rng"]["torch"], states[2]["rng"]["torch"])
    False
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from replay.sampling.streams import stream_seed

RESIZE = 2  # stream key tag: a rank's resize streams (join's seeds use keys () and (1,))
PARTS = {"torch": 1, "cuda": 2, "replay": 3}  # non-zero: trailing zeros alias in SeedSequence


def rank_stream_seed(seed: int, generation: int, rank: int, part: str) -> int:
    """The seed of one new rank's RNG stream after a resize.

    Args:
        seed: The run's seed (a negative one is taken modulo ``2**64``).
        generation: The new group's generation.
        rank: The new rank.
        part: ``torch``, ``cuda`` or ``replay``.

    Examples:
        >>> rank_stream_seed(0, 1, 0, "torch") != rank_stream_seed(0, 1, 1, "torch")
        True
    """
    return stream_seed(int(seed) % 2**64, "shuffle", rank, generation, key=(RESIZE, PARTS[part]))


def torch_rng_state(seed: int) -> torch.Tensor:
    """A CPU torch generator state (``torch.set_rng_state``) seeded with ``seed``."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator.get_state()


def cuda_rng_state(seed: int) -> torch.Tensor:
    """A CUDA (Philox) generator state: 8 bytes of seed, then 8 bytes of offset 0.

    This is the layout ``torch.cuda.get_rng_state`` returns and ``set_rng_state`` takes; built
    here without a GPU.
    """
    return torch.tensor([seed, 0], dtype=torch.int64).view(torch.uint8).clone()


def numpy_rng_state(seed: int, like: Mapping) -> dict:
    """The ``bit_generator.state`` of a fresh generator of the same kind as ``like``."""
    kind = getattr(np.random, like["bit_generator"])
    return kind(np.random.SeedSequence(seed)).state


def check_state_set(states: Sequence[Mapping]) -> None:
    """Checks that ``states`` are one group's ranks in rank order, at one version.

    Raises:
        ValueError: If ranks are missing, repeated or out of order, the world sizes disagree
            with the number of states, or the versions differ.
    """
    metas = [s.get("meta", {}) for s in states]
    ranks = [m.get("rank") for m in metas]
    sizes = {m.get("world_size") for m in metas}
    if not states or ranks != list(range(len(states))) or sizes != {len(states)}:
        raise ValueError(
            f"learner state of {len(states)} rank(s) (ranks {ranks}, world_size "
            f"{sorted(sizes, key=str)}) is not one group's ranks 0..world_size-1 in order"
        )
    versions = [s.get("version") for s in states]
    if len(set(versions)) != 1:
        raise ValueError(f"learner states disagree on the model version: {versions}")


def states_for_world_size(
    states: Sequence[Mapping], world_size: int, *, seed: int, generation: int
) -> list[dict]:
    """Learner states (:meth:`LearnerGroup.state_dicts`) restorable into ``world_size`` ranks.

    With as many states as ``world_size``, returns them unchanged (each rank continues its own
    RNG streams bit-exactly). Otherwise every new rank gets rank 0's model, target networks,
    stepper (optimizers, LR scheduler, grad scaler, counters) and version, with ``meta`` rank
    and world size rewritten (``meta["resized_from"]`` records the source world size and
    generation) and ``rng`` replaced by streams of its own (:func:`rank_stream_seed`: torch,
    CUDA even when the source ranks had none, and the replay split generator). Tensors
    are shared with ``states``, not copied; ``states`` is not modified.

    Args:
        states: Every rank's state of one group, in rank order.
        world_size: The new group's world size.

    Keyword Args:
        seed: The run's seed.
        generation: The new group's generation.

    Returns:
        One state per new rank, in rank order.

    Raises:
        ValueError: If ``states`` are not one group's ranks at one version (nothing to load),
            or ``world_size < 1``; messages say ``cannot be restored into world_size N``.
    """
    if world_size < 1:
        raise ValueError(f"world_size: must be >= 1, got {world_size!r}")
    try:
        check_state_set(states)
    except ValueError as err:
        raise ValueError(f"{err}: cannot be restored into world_size {world_size}") from err
    if len(states) == world_size:
        return [dict(s) for s in states]
    source = states[0]
    meta = dict(source["meta"])
    resized_from = {"world_size": len(states), "generation": meta.get("generation")}
    out = []
    for rank in range(world_size):
        rng: dict[str, Any] = {
            "torch": torch_rng_state(rank_stream_seed(seed, generation, rank, "torch")),
            # Always: a CPU-saved state may restore onto GPU ranks (CPU ranks ignore it).
            "cuda": cuda_rng_state(rank_stream_seed(seed, generation, rank, "cuda")),
        }
        if "replay" in source["rng"]:
            replay_seed = rank_stream_seed(seed, generation, rank, "replay")
            rng["replay"] = numpy_rng_state(replay_seed, source["rng"]["replay"])
        state: dict[str, Any] = dict(source)
        state["rng"] = rng
        state["meta"] = {
            **meta,
            "rank": rank,
            "world_size": world_size,
            "resized_from": resized_from,
        }
        out.append(state)
    return out
