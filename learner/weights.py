"""The tensor schema of published weights, checked against the collectors' policy."""

from __future__ import annotations

from collections.abc import Mapping

import torch

Schema = dict[str, tuple[tuple[int, ...], str]]


class WeightSchemaError(ValueError):
    """Published weights whose names, shapes or dtypes differ from the collectors' policy."""


def tensor_schema(tensors: Mapping[str, torch.Tensor]) -> Schema:
    """``{name: (shape, dtype)}`` of a state dict, e.g. ``{"0.weight": ((64, 4), "float32")}``."""
    return {
        name: (tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in tensors.items()
    }


def spec_schema(model_spec) -> Schema:
    """The schema of ``model_spec.build()``'s state dict, built without allocating weights."""
    try:
        with torch.device("meta"):
            module = model_spec.build()
    except (RuntimeError, NotImplementedError):  # a builder that needs real tensors
        module = model_spec.build()
    return tensor_schema(module.state_dict())


def check_schema(actual: Schema, expected: Schema, *, what: str = "published weights") -> None:
    """Raises unless ``actual`` has exactly the names, shapes and dtypes of ``expected``.

    Raises:
        WeightSchemaError: Naming missing, unexpected and mismatched tensors (first five each).

    Examples:
        >>> check_schema({"w": ((2, 2), "float32")}, {"w": ((2, 3), "float32")})
        Traceback (most recent call last):
        ...
        learner.weights.WeightSchemaError: published weights do not match the collectors' \
policy: w: learner (2, 2) float32 vs collectors (2, 3) float32
    """
    missing = sorted(set(expected) - set(actual))
    unexpected = sorted(set(actual) - set(expected))
    mismatched = [
        f"{name}: learner {actual[name][0]} {actual[name][1]} vs collectors "
        f"{expected[name][0]} {expected[name][1]}"
        for name in sorted(set(actual) & set(expected))
        if tuple(actual[name][0]) != tuple(expected[name][0])
        or actual[name][1] != expected[name][1]
    ]
    problems = []
    if missing:
        problems.append(f"missing {missing[:5]}")
    if unexpected:
        problems.append(f"unexpected {unexpected[:5]}")
    problems += mismatched[:5]
    if problems:
        raise WeightSchemaError(
            f"{what} do not match the collectors' policy: " + "; ".join(problems)
        )
