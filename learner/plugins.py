"""Resolution of factories named by ``"module:attribute"`` paths, and the built-in steppers.

:data:`STEPPERS` is the one list of the optimization steppers ``learner.stepper`` names without
a path: ``LearnerConfig`` validates against it, ``learner.core`` builds from it and a rank reads
how DDP must wrap each. It holds paths, imported on use, so checking a config imports no torch.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class BuiltinStepper:
    """A built-in stepper: where its factory lives and what it asks of the run.

    Attributes:
        factory: ``module:attribute`` path of ``factory(loss_module, learner_config)``.
        fp32_only: It runs fp32 without gradient accumulation (``mixed_precision`` does both).
        partial_parameters: Its steps touch a subset of the parameters each (one loss method
            per optimizer, or a delayed actor), so DDP must find unused parameters.
    """

    factory: str
    fp32_only: bool = True
    partial_parameters: bool = False


STEPPERS: dict[str, BuiltinStepper] = {
    "default": BuiltinStepper("learner.stepper:DefaultStepper.from_config"),
    "mixed_precision": BuiltinStepper(
        "learner.precision:MixedPrecisionStepper.from_config", fp32_only=False
    ),
    "delayed_policy": BuiltinStepper(
        "learner.delayed:DelayedPolicyStepper.from_config", partial_parameters=True
    ),
    "multi_optimizer": BuiltinStepper(
        "learner.multi:MultiOptimizerStepper.from_config", partial_parameters=True
    ),
}


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
    if name not in STEPPERS:
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
