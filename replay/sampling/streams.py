"""Random streams derived from ``(seed, component, index, generation)``: one per use, no sharing.

A run's random numbers come from many places at once: every collector's env resets and
exploration, every shard's sampler, every learner rank's minibatch shuffles and the network's
initial parameters. In the default mode some of them share one generator whose draws then
depend on the order in which requests arrive. A deterministic run (``run.deterministic``)
gives each use its own stream, named by what it is for and never by when it is asked for:

* ``component``: one of :data:`COMPONENTS` (``env``, ``explore``, ``replay``, ``shuffle``,
  ``init``);
* ``index``: which one of them (the collector index, the shard index, the learner rank);
* ``generation``: the lineage step that re-seeds it (a learner generation, a restore epoch);
* ``key``: optional further integers that name one request (a requester and its request
  number, a round), so that two requests never draw from a shared position of a stream.

The same tuple always gives the same stream, on any machine and in any process; any two
different tuples give independent streams (``numpy.random.SeedSequence`` entropy pools).

Examples:
    >>> a = stream_generator(7, "replay", 1, 0, key=(0, 3)).random()
    >>> b = stream_generator(7, "replay", 1, 0, key=(0, 3)).random()
    >>> a == b
    True
    >>> a == stream_generator(7, "replay", 1, 0, key=(1, 3)).random()
    False
    >>> stream_seed(0, "init", 0, 0) == stream_seed(0, "init", 0, 0)
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Stable numbers for the components (never reorder: they are part of every stream's identity).
COMPONENTS: dict[str, int] = {
    "env": 1,
    "explore": 2,
    "replay": 3,
    "shuffle": 4,
    "init": 5,
}


def stream_sequence(
    seed: int, component: str, index: int, generation: int = 0, *, key: Sequence[int] = ()
) -> np.random.SeedSequence:
    """The ``SeedSequence`` of one stream.

    Args:
        seed: The run's seed (``>= 0``).
        component: A key of :data:`COMPONENTS`.
        index: Which instance of the component (collector index, shard index, rank).
        generation: Lineage step (learner generation, restore epoch).

    Keyword Args:
        key: Further non-negative integers naming one request within the stream.

    Raises:
        ValueError: An unknown component or a negative number.
    """
    if component not in COMPONENTS:
        raise ValueError(f"component: must be one of {tuple(COMPONENTS)}, got {component!r}")
    entropy = [int(seed), COMPONENTS[component], int(index), int(generation), *map(int, key)]
    if any(value < 0 for value in entropy):
        raise ValueError(f"stream numbers must be >= 0, got {entropy}")
    return np.random.SeedSequence(entropy)


def stream_seed(
    seed: int, component: str, index: int, generation: int = 0, *, key: Sequence[int] = ()
) -> int:
    """A 63-bit integer seed of one stream (for ``torch.manual_seed`` or an env's ``reset``)."""
    state = stream_sequence(seed, component, index, generation, key=key).generate_state(
        2, np.uint32
    )
    return (int(state[0]) << 31 | int(state[1]) >> 1) & (2**63 - 1)


def stream_generator(
    seed: int, component: str, index: int, generation: int = 0, *, key: Sequence[int] = ()
) -> np.random.Generator:
    """A fresh PCG64 ``numpy.random.Generator`` on one stream."""
    return np.random.default_rng(stream_sequence(seed, component, index, generation, key=key))


def stream_seeds(
    seed: int, component: str, index: int, count: int, generation: int = 0
) -> list[int]:
    """``count`` distinct 32-bit seeds of one stream (e.g. one reset seed per sub-env).

    Examples:
        >>> len(set(stream_seeds(0, "env", 0, 8)))
        8
    """
    state = stream_sequence(seed, component, index, generation).generate_state(count)
    return [int(s) for s in state]
