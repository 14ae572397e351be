"""The YAML loader: a file plus ``--set a.b=value`` overrides, converted to :class:`RunConfig`.

:func:`load_config` merges a YAML file with ``KEY=VALUE`` overrides, fills what neither sets from
the algorithm's recipe (``services.config.recipes``), converts each value to its field's
annotated type, and raises :class:`ConfigError` naming the first bad field
(``learner.world_size: must be ...``) before anything starts. :func:`config_from_dict` does the
same for a nested mapping (the Python API's dict configs, a checkpoint's ``config.json``) with
overrides given as a mapping of dotted keys to values.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from services.config.determinism import with_mode_defaults
from services.config.recipes import AlgorithmConfigError, with_defaults
from services.config.sections import ConfigError, RunConfig


def _convert(path: str, value, hint):
    """Converts ``value`` to the annotated type ``hint`` or raises ConfigError."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(path, value, option)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0])
    if hint in (int, float) and isinstance(value, str):
        with contextlib.suppress(ValueError):  # YAML 1.1 reads "3e4" as a string
            value = float(value.replace("_", ""))
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path}: must be an integer, got {value!r}")
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{path}: must be a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path}: must be a string, got {value!r}")
    if origin is tuple:
        if isinstance(value, str):  # --set a.b=x,y (YAML reads it as one string)
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{path}: must be a list, got {value!r}")
        (item,) = typing.get_args(hint)[:1]
        return tuple(_convert(f"{path}[{i}]", v, item) for i, v in enumerate(value))
    if hint is dict or origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: must be a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(hint):
        return _build(path, hint, value)
    raise ConfigError(f"{path}: unsupported field type {hint!r}")


def _build(prefix: str, cls, data):
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix or 'config'}: must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            where = f"{prefix}.{key}" if prefix else key
            raise ConfigError(f"{where}: unknown key; accepted: {', '.join(sorted(fields))}")
    kwargs = {}
    for key, value in data.items():
        where = f"{prefix}.{key}" if prefix else key
        kwargs[key] = _convert(where, value, hints[key])
    try:
        return cls(**kwargs)
    except ValueError as err:
        if isinstance(err, ConfigError):
            raise
        message = str(err)
        raise ConfigError(f"{prefix}.{message}" if prefix else message) from None


def parse_override(text: str) -> tuple[list[str], object]:
    """Parses ``a.b=value``: the value is read as YAML (``2``, ``0.5``, ``[64, 64]``, ``true``).

    Raises:
        ConfigError: If ``text`` has no ``=``.
    """
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. learner.world_size=2")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> RunConfig:
    """Builds a validated RunConfig from a YAML file and ``KEY=VALUE`` overrides.

    The algorithm's recipe (``services.config.recipes``) fills the fields that neither the file
    nor the overrides set.

    Args:
        path: Optional YAML file with the same nesting as :class:`RunConfig`.
        overrides: Dotted assignments applied after the file, e.g. ``"learner.world_size=2"``.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: Naming the first unknown key or invalid value.

    Examples:
        >>> load_config(overrides=["learner.world_size=2"]).learner.world_size
        2
    """
    data: dict = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"config file {path}: {err}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: must hold a mapping at the top level")
        data = loaded or {}
    return config_from_dict(data, overrides)


def config_from_dict(
    data: Mapping, overrides: Iterable[str] | Mapping[str, object] = ()
) -> RunConfig:
    """Builds a validated RunConfig from a nested mapping, as :func:`load_config` does a file.

    Args:
        data: The config, nested like the YAML (left unchanged).
        overrides: ``"KEY=VALUE"`` strings, or a mapping of dotted keys to values
            (``{"learner.lr": 5e-4}``), applied after ``data``.

    Raises:
        ConfigError: Naming the first unknown key or invalid value.

    Examples:
        >>> config_from_dict({"algorithm": "ppo"}, {"learner.lr": 5e-4}).learner.lr
        0.0005
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"config: must be a mapping, got {type(data).__name__}")
    data = copy.deepcopy(dict(data))
    if isinstance(overrides, Mapping):
        assignments = [(str(key).split("."), value) for key, value in overrides.items()]
    else:
        assignments = [parse_override(text) for text in overrides]
    for keys, value in assignments:
        node = data
        for depth, key in enumerate(keys[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{'.'.join(keys[: depth + 1])}: is not a section")
            node = child
        node[keys[-1]] = value
    data = with_mode_defaults(data)
    try:
        data = with_defaults(data)
    except AlgorithmConfigError as err:
        raise ConfigError(str(err)) from None
    return _build("", RunConfig, data)
