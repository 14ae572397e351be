"""Refusals of what a deterministic run (``run.deterministic``) cannot promise (no torch).

A deterministic run's bits may depend only on the seed, the config and frame counts. So it
refuses what acts on arrival or on the wall clock: experience from external actors (gRPC, in
arrival order), early stopping on progress snapshots (taken by the clock) or on the running
mean return (fed in arrival order within a round), checkpoints by wall time (every cut starts
fresh episodes, see ``docs/determinism.md``), and ``torch.compile``'s generated kernels. What
``torch.use_deterministic_algorithms`` itself refuses at run time is named by torch's error.
"""

from __future__ import annotations


class DeterminismConfigError(ValueError):
    """A field a deterministic run cannot honour; the message names it."""


# The fields whose default a deterministic run changes, where the config does not set them.
DETERMINISTIC_DEFAULTS = {("checkpoint", "interval_s"): 0.0}


def with_mode_defaults(data: dict) -> dict:
    """``data`` with the deterministic mode's defaults where it sets ``run.deterministic``.

    A field the config sets keeps its value (and is refused by :func:`check_deterministic` when
    the mode cannot honour it); one it leaves out takes the mode's default, so
    ``--set run.deterministic=true`` alone is a valid run.

    Examples:
        >>> with_mode_defaults({"run": {"deterministic": True}})["checkpoint"]
        {'interval_s': 0.0}
    """
    run = data.get("run")
    if not isinstance(run, dict) or run.get("deterministic") is not True:
        return data
    for (section, field), value in DETERMINISTIC_DEFAULTS.items():
        node = data.setdefault(section, {})
        if isinstance(node, dict):
            node.setdefault(field, value)
    return data


def check_deterministic(config) -> None:
    """Refuses, naming the field, what a deterministic run cannot reproduce.

    Args:
        config: A :class:`~services.config.sections.RunConfig`.

    Raises:
        DeterminismConfigError: ``<section>.<field>: ...`` for the first field refused.

    Examples:
        >>> from services.config import config_from_dict
        >>> config_from_dict({}, ["run.deterministic=true", "checkpoint.interval_s=30"])
        Traceback (most recent call last):
        ...
        services.config.sections.ConfigError: checkpoint.interval_s: a deterministic run cuts \
checkpoints at frame counts only (checkpoint.interval_frames); must be 0, got 30.0
    """
    if not config.run.deterministic:
        return
    why = "run.deterministic"
    if config.grpc.enabled:
        raise DeterminismConfigError(
            f"grpc.port: {why} cannot take external actors' experience, which arrives in no "
            f"fixed order; must be null, got {config.grpc.port!r}"
        )
    ctrl = config.controller
    if ctrl.early_stop_metric is not None:
        raise DeterminismConfigError(
            "controller.early_stop_metric: early stopping reads progress snapshots taken by "
            f"the wall clock, which {why} cannot reproduce; must be null, got "
            f"{ctrl.early_stop_metric!r}"
        )
    if ctrl.stop_return is not None:
        raise DeterminismConfigError(
            "controller.stop_return: the running mean return is fed in arrival order, which "
            f"{why} cannot reproduce; must be null, got {ctrl.stop_return!r}"
        )
    if config.checkpoint.interval_s:
        raise DeterminismConfigError(
            "checkpoint.interval_s: a deterministic run cuts checkpoints at frame counts only "
            f"(checkpoint.interval_frames); must be 0, got {config.checkpoint.interval_s!r}"
        )
    if config.learner.compile != "off":
        raise DeterminismConfigError(
            "learner.compile: torch.compile's generated kernels are not covered by "
            f"torch.use_deterministic_algorithms; must be 'off' with {why}, got "
            f"{config.learner.compile!r}"
        )
