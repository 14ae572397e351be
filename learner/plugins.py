"""Resolution of user-supplied factories named by ``"module:attribute"`` paths."""

from __future__ import annotations

import importlib
from collections.abc import Callable


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
