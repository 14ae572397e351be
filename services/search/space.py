"""The search space of ``relayrl tune``: a YAML file of config fields and their distributions.

Each key is a dotted config field; each value a distribution, a list or a constant::

    learner.lr: {loguniform: [1.0e-5, 1.0e-2]}
    learner.onpolicy.ent_coef: [0.0, 0.01]      # a grid: every value, --num-samples times each
    collector.epsilon_end: {uniform: [0.01, 0.1]}
    learner.global_batch_size: {choice: [32, 64]}
    controller.utd_ratio: {randint: [1, 4]}

A list is Tune's ``grid_search``; ``choice`` samples one value per trial. Under PBT the same
entries are the mutations (a list or ``choice``: resampled among the values; ``uniform`` or
``loguniform``: resampled, or the value scaled by 0.8 or 1.2); PB2 takes ``uniform`` and
``loguniform`` only (its model needs bounds). Everything is checked before anything starts
(:func:`check_space`): every key is a config field and every bound or value makes a valid
config; fields the search sets itself are refused; under PBT/PB2 so are the fields a resumed
checkpoint cannot change (:data:`IMMUTABLE`: network shape, env, algorithm), naming the field.

Examples:
    >>> space = parse_space({"learner.lr": {"loguniform": [1e-4, 1e-2]}, "seed": [0, 1]})
    >>> [(d.key, d.kind, d.values) for d in space]
    [('learner.lr', 'loguniform', (0.0001, 0.01)), ('seed', 'grid', (0, 1))]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from services.checkpoints.resume import PINNED_FIELDS
from services.config import ConfigError, config_from_dict, parse_override

DISTRIBUTIONS = ("loguniform", "uniform", "randint", "choice")
# Fields a PBT exploit cannot change: a resumed checkpoint holds state shaped by them.
IMMUTABLE = (
    *PINNED_FIELDS,
    "collector.env_kwargs",
    "collector.frame_skip",
    "collector.global_state",
    "learner.pixel_torso",
    "learner.marl",
    "replay.frame_stack",
    "replay.storage",
    "learner.stepper",
    "learner.optimizer",
)
# Fields the search sets for every trial.
RESERVED = ("controller.total_frames", "run.dir", "run.storage", "checkpoint.dir")


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One searched config field.

    Attributes:
        key: The dotted config field.
        kind: ``loguniform``, ``uniform``, ``randint``, ``choice``, ``grid`` or ``constant``.
        values: The bounds (``loguniform``, ``uniform``, ``randint``) or the values.
    """

    key: str
    kind: str
    values: tuple

    def candidates(self) -> tuple:
        """The values checked before the search starts (the bounds, or every value)."""
        if self.kind == "randint":
            return (self.values[0], self.values[1] - 1)  # Tune's upper bound is exclusive
        return self.values

    def domain(self):
        """The Tune search-space object (``tune.loguniform(...)``, ``grid_search``, ...)."""
        from ray import tune

        if self.kind == "grid":
            return tune.grid_search(list(self.values))
        if self.kind == "choice":
            return tune.choice(list(self.values))
        if self.kind == "constant":
            return self.values[0]
        return getattr(tune, self.kind)(*self.values)

    def mutation(self):
        """What PBT resamples from (a list of values, or the distribution)."""
        if self.kind in ("grid", "choice", "constant"):
            return list(self.values)
        return self.domain()


def parse_space(data: Any, source: str = "--space") -> list[Dimension]:
    """The dimensions of a space mapping (the YAML file's content).

    Raises:
        ConfigError: Naming the key whose entry is not a distribution, a list or a constant.
    """
    if not isinstance(data, Mapping) or not data:
        raise ConfigError(f"{source}: must map config fields to distributions, got {data!r}")
    dims = []
    for key, entry in data.items():
        where = f"{source} {key}"
        if isinstance(entry, list):
            if not entry:
                raise ConfigError(f"{where}: an empty list")
            dims.append(Dimension(str(key), "grid", tuple(entry)))
        elif isinstance(entry, Mapping):
            if len(entry) != 1 or next(iter(entry)) not in DISTRIBUTIONS:
                raise ConfigError(
                    f"{where}: must be one of {{{': [...]}, {'.join(DISTRIBUTIONS)}: [...]}}, "
                    f"or a list (a grid), got {dict(entry)!r}"
                )
            kind, values = next(iter(entry.items()))
            dims.append(_distribution(where, str(key), kind, values))
        else:
            dims.append(Dimension(str(key), "constant", (entry,)))
    return dims


def _distribution(where: str, key: str, kind: str, values: Any) -> Dimension:
    if kind == "choice":
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: choice takes a non-empty list, got {values!r}")
        return Dimension(key, kind, tuple(values))
    numbers = isinstance(values, list) and len(values) == 2
    numbers = numbers and all(isinstance(v, int | float) for v in values)
    if not numbers or not values[0] < values[1]:
        raise ConfigError(f"{where}: {kind} takes [low, high] with low < high, got {values!r}")
    if kind == "loguniform" and values[0] <= 0:
        raise ConfigError(f"{where}: loguniform bounds must be > 0, got {values!r}")
    if kind == "randint":
        return Dimension(key, kind, (int(values[0]), int(values[1])))
    return Dimension(key, kind, (float(values[0]), float(values[1])))


def load_space(path: str | Path) -> list[Dimension]:
    """Reads and parses a space file (:func:`parse_space`).

    Raises:
        ConfigError: If the file cannot be read or an entry is malformed.
    """
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"--space {path}: {err}") from None
    return parse_space(data, f"--space {path}:")


def raw_config(path: str | Path | None, sets: list[str]) -> dict:
    """The config file's mapping with the ``--set`` overrides applied (recipe not yet filled).

    Raises:
        ConfigError: If the file cannot be read or an override is malformed.
    """
    data: dict = {}
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"config file {path}: {err}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path}: must hold a mapping at the top level")
    for text in sets:
        keys, value = parse_override(text)
        node = data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return data


def check_space(
    dims: list[Dimension], raw: Mapping, scheduler: str, fixed: Mapping | None = None
) -> None:
    """Refuses what cannot be searched, before anything starts (see the module).

    Args:
        dims: The space.
        raw: The base config (:func:`raw_config`).
        scheduler: ``pbt``, ``pb2``, ``asha`` or ``fifo``.
        fixed: Dotted overrides every trial gets.

    Raises:
        ConfigError: ``--space <field>: ...`` naming the field and why.
    """
    for dim in dims:
        where = f"--space {dim.key}"
        if dim.key in RESERVED:
            raise ConfigError(f"{where}: set by the search itself (--max-frames, --dir)")
        if scheduler in ("pbt", "pb2") and dim.key in IMMUTABLE:
            raise ConfigError(
                f"{where}: {scheduler} cannot mutate it (a checkpoint resumed by an exploit "
                "holds state it shapes: network, env, algorithm); search it with asha or fifo"
            )
        if scheduler == "pb2" and dim.kind not in ("uniform", "loguniform"):
            raise ConfigError(f"{where}: pb2 takes uniform or loguniform bounds, got {dim.kind}")
        for value in dim.candidates():
            try:
                config_from_dict(raw, {**(fixed or {}), dim.key: value})
            except ConfigError as err:
                raise ConfigError(f"{where}: {value!r} is refused: {err}") from None
