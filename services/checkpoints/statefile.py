"""Component state on disk without pickle: JSON for plain values, ``.npz`` for arrays.

A state is a nested dict of plain values (numbers, strings, lists, dicts) and arrays (numpy
arrays or torch tensors). :func:`save_state` writes ``<stem>.json`` with every array replaced by
a reference and ``<stem>.npz`` with the arrays; :func:`load_state` reads them back with
``allow_pickle=False`` (arrays come back as numpy arrays).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from replay.persist.npyio import CheckpointError

ARRAY = "__array__"


def _split(value, arrays: dict[str, np.ndarray], path: str):
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = value
        return {ARRAY: key, "path": path}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _split(v, arrays, f"{path}/{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_split(v, arrays, f"{path}/{i}") for i, v in enumerate(value)]
    return value


def _join(value, arrays):
    if isinstance(value, dict):
        if ARRAY in value:
            return arrays[value[ARRAY]]
        return {k: _join(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_join(v, arrays) for v in value]
    return value


def save_state(stem: Path, state: dict) -> None:
    """Writes ``stem.json`` and ``stem.npz``."""
    arrays: dict[str, np.ndarray] = {}
    plain = _split(state, arrays, "")
    stem.with_suffix(".json").write_text(json.dumps(plain, sort_keys=True))
    with stem.with_suffix(".npz").open("wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub: a key may be allow_pickle


def load_state(stem: Path) -> dict:
    """Reads a state written by :func:`save_state`.

    Raises:
        CheckpointError: Naming the file that is missing or unreadable.
    """
    json_path, npz_path = stem.with_suffix(".json"), stem.with_suffix(".npz")
    try:
        plain = json.loads(json_path.read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{json_path}: unreadable ({err})") from None
    try:
        with np.load(npz_path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{npz_path}: unreadable ({err})") from None
    return _join(plain, arrays)
