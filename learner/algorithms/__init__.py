"""The algorithm registry: one registration module per algorithm, found by walking this package.

Each module here (``dqn``, ``ppo``, ...) declares ``REGISTERED``, a tuple of
:class:`~learner.algorithms.spec.Algorithm` (one per algorithm; the multi-agent module
registers its three mixers). Everything that differs between algorithms is read from these
declarations, never from a branch on a name:

* :data:`ALGORITHMS`: the ``algorithm`` values and their recipes (``services.config.recipes``
  fills a config's defaults from them and ``services.config.checks`` refuses from their fields);
* ``learner.losses.LOSSES`` (the built-in ``learner.loss`` keys and ``stepper: auto``),
  :data:`OPTION_SECTIONS` (the ``learner.<section>`` options of ``LearnerConfig``),
  :func:`torchrl_factory` (``learner.loss: torchrl:<Class>``);
* ``learner.gpu.algorithms`` (the GPU checks), ``services.bench solve`` and ``learn`` (tasks and
  entries), and the tests' lists of algorithms and shipped configs.

Modules import nothing heavy (no torch, no Ray): a config is validated before any actor starts.
Adding an algorithm: ``docs/development.md``, "Adding an algorithm".

Examples:
    >>> ALGORITHMS[DEFAULT].default
    True
    >>> "onpolicy" in OPTION_SECTIONS  # learner.onpolicy, shared by the on-policy registrations
    True
    >>> all(algo.loss in {a.loss for a in ALGORITHMS.values()} for algo in ALGORITHMS.values())
    True
"""

from __future__ import annotations

import importlib
import pkgutil

from learner.algorithms.spec import Algorithm, GpuCheck, LearnEntry, Reference, SolveTask

_NOT_REGISTRATIONS = {"spec"}


def _discover() -> dict[str, Algorithm]:
    found: list[Algorithm] = []
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name in _NOT_REGISTRATIONS or module.name.startswith("_"):
            continue
        registered = importlib.import_module(f"{__name__}.{module.name}").REGISTERED
        found.extend(registered)
    defaults = [algo.name for algo in found if algo.default]
    if len(defaults) != 1:
        raise RuntimeError(f"exactly one registration must be the default, got {defaults}")
    names = [algo.name for algo in found]
    if len(set(names)) != len(names):
        raise RuntimeError(f"an algorithm is registered twice: {names}")
    found.sort(key=lambda algo: not algo.default)  # the default first, then by module
    return {algo.name: algo for algo in found}


ALGORITHMS: dict[str, Algorithm] = _discover()
DEFAULT: str = next(iter(ALGORITHMS))


def _option_sections() -> dict[str, type]:
    sections: dict[str, type] = {}
    for algo in ALGORITHMS.values():
        for name, options in algo.options.items():
            if sections.setdefault(name, options) is not options:
                raise RuntimeError(f"learner.{name}: two registrations declare different options")
    return sections


OPTION_SECTIONS: dict[str, type] = _option_sections()


def torchrl_factory(class_name: str) -> tuple[str, str] | None:
    """The algorithm a ``torchrl:<class_name>`` loss trains, and the factory that builds it.

    A class named by a registration wins; otherwise a registration's ``*`` (any class taking a
    ``value_network``). None: no registration takes TorchRL losses.

    Examples:
        >>> torchrl_factory("ClipPPOLoss")[1]
        'learner.losses.torchrl_ppo:torchrl_ppo_loss'
    """
    for key in (class_name, "*"):
        for algo in ALGORITHMS.values():
            if key in algo.torchrl_losses:
                return algo.name, algo.torchrl_losses[key]
    return None


def named_torchrl_classes() -> tuple[str, ...]:
    """The TorchRL classes registrations name explicitly (not through ``*``)."""
    return tuple(c for a in ALGORITHMS.values() for c in a.torchrl_losses if c != "*")


def learn_entries() -> list[LearnEntry]:
    """Every registration's ``services.bench learn`` entries, in the order a suite runs them."""
    entries = [entry for algo in ALGORITHMS.values() for entry in algo.learn]
    return sorted(entries, key=lambda entry: entry.position)


def solve_tasks() -> dict[str, SolveTask]:
    """``services.bench solve``'s task per algorithm that has one."""
    return {name: algo.solve for name, algo in ALGORITHMS.items() if algo.solve is not None}


def shipped_configs() -> dict[str, str]:
    """Each shipped config file (in ``deploy/configs/``) a registration names, to its algorithm."""
    return {config: algo.name for algo in ALGORITHMS.values() for config in algo.configs}


def featured_config(role: str) -> str:
    """The shipped config (a file in ``deploy/configs/``) a registration features as ``role``.

    Roles: e.g. ``help``, ``bench_startup`` (:class:`~learner.algorithms.spec.Algorithm`).

    Raises:
        KeyError: If no registration, or more than one, features ``role``.

    Examples:
        >>> featured_config("help").endswith(".yaml")
        True
    """
    found = [algo.featured[role] for algo in ALGORITHMS.values() if role in algo.featured]
    if len(found) != 1:
        raise KeyError(f"role {role!r}: featured by {len(found)} registrations, not one")
    return found[0]


def bench_overrides(bench: str) -> dict[str, list[str]]:
    """Each algorithm that ``bench`` runs, with its overrides (``algorithm=<name>`` first)."""
    return {
        name: [f"algorithm={name}", *algo.bench[bench]]
        for name, algo in ALGORITHMS.items()
        if bench in algo.bench
    }


__all__ = [
    "ALGORITHMS",
    "DEFAULT",
    "OPTION_SECTIONS",
    "Algorithm",
    "GpuCheck",
    "LearnEntry",
    "Reference",
    "SolveTask",
    "bench_overrides",
    "featured_config",
    "learn_entries",
    "named_torchrl_classes",
    "shipped_configs",
    "solve_tasks",
    "torchrl_factory",
]
