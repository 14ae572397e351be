"""Resolution of user-supplied factories named by ``"module:attribute"`` paths."""

from __future__ import annotations

import importlib
from collections.abc import Callable

# The optimization steppers ``learner.stepper`` names without a path (``learner.core`` maps each
# to its class; kept here, light, so the driver checks a config without importing them).
BUILTIN_STEPPERS = ("default", "mixed_precision", "delayed_policy", "multi_optimizer")


def check_stepper(name: str) -> None:
    """Refuses a stepper that is neither built in nor an importable ``module:attribute``.

    Raises:
        ValueError: Naming ``stepper`` and why.

    Examples:
        >>> check_stepper("default")
        >>> check_stepper("nope:x")
        Traceback (most recent call last):
        ...
        ValueError: stepper: cannot import module 'nope' of 'nope:x': No module named 'nope'
    """
    if name not in BUILTIN_STEPPERS:
        resolve_factory(name, "stepper")


def resolve_factory(path: str, field: str) -> Callable:
    """Imports ``"package.module:attr.sub"`` and returns the callable it names.

    Args:
        path: ``module:attribute`` path, e.g. ``"mypkg.losses:make_loss"``.
        field: Config field named in error messages (``loss``, ``stepper``).

    Returns:
        The callable.

    Raises:
        ValueError: If the module cannot be imported or the attribute is missing or not callable.

    Examples:
        >>> resolve_factory("learner.losses.dqn:dqn_loss", "loss").__name__
        'dqn_loss'
    """
    module_name, _, attr_path = path.partition(":")
    try:
        target = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(
            f"{field}: cannot import module {module_name!r} of {path!r}: {err}"
        ) from None
    for attr in attr_path.split("."):
        try:
            target = getattr(target, attr)
        except AttributeError:
            raise ValueError(f"{field}: {module_name!r} has no attribute {attr_path!r}") from None
    if not callable(target):
        raise ValueError(f"{field}: {path!r} is not callable")
    return target
