"""Algorithm recipes: the registrations of ``learner.algorithms``, as the config sees them.

An algorithm is data, not a branch in the controller (``docs/algorithms.md``): its registration
(``learner.algorithms.<module>``, an :class:`~learner.algorithms.spec.Algorithm`) names

* a **loop** (``services.driver.loops``): ``offpolicy`` (asynchronous collection into
  replay, learner rounds paced by the update-to-data ratio) or ``onpolicy`` (lockstep
  iterations: collect one batch with the current version into FIFO tables, train epochs of
  minibatches on exactly that batch, publish);
* a **loss** (``learner.losses.LOSSES``, derived from the registrations), named by
  ``learner.loss``, and the stepper ``learner.stepper: auto`` picks for it;
* a **network** (``collector.networks.builders.NETWORKS``), whose spec makes the collector
  policy (epsilon-greedy over Q-values, a categorical or Gaussian actor-critic, a tanh-Gaussian
  actor, or per-agent epsilon-greedy), and for on-policy collectors their targets (GAE or
  Monte-Carlo returns);
* its options section, the fields it fixes, the checks it adds, its shipped configs and its
  bench tasks.

``algorithm: <name>`` in a config selects a recipe; the recipe's ``defaults`` fill every field
the config leaves unset (so ``--set algorithm=<name>`` alone is a working run), and
``services.config.checks`` refuses, from the recipe's fields, combinations that cannot work
before any actor starts.

Examples:
    >>> recipe = ALGORITHMS[DEFAULT]
    >>> recipe.loss in {algo.loss for algo in ALGORITHMS.values()}
    True
    >>> with_defaults({}) == dict(ALGORITHMS[DEFAULT].defaults)
    True
"""

from __future__ import annotations

from collections.abc import Mapping

from learner.algorithms import ALGORITHMS, DEFAULT
from learner.algorithms.spec import Algorithm, merged


class AlgorithmConfigError(ValueError):
    """A combination the algorithm cannot run; the message names the field."""


def algorithm_for(config) -> Algorithm:
    """The recipe of ``config.algorithm``."""
    return ALGORITHMS[config.algorithm]


def with_defaults(data: Mapping) -> dict:
    """``data`` (a raw config mapping) completed with its algorithm's defaults.

    Raises:
        AlgorithmConfigError: If ``algorithm`` names no recipe.
    """
    name = data.get("algorithm", DEFAULT)
    if name not in ALGORITHMS:
        raise AlgorithmConfigError(f"algorithm: must be one of {tuple(ALGORITHMS)}, got {name!r}")
    return merged(ALGORITHMS[name].defaults, data)


__all__ = ["ALGORITHMS", "DEFAULT", "Algorithm", "AlgorithmConfigError", "algorithm_for"]
