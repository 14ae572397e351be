"""Exporting a policy's forward to a file that runs without relayrl: ``pt2`` and ONNX.

The exported function is the policy's :class:`~services.policy.heads.PolicyHead`: a batch of
observations ``observation`` ``[B, *obs_shape]`` (float32, or uint8 frames) to action scores
(``q_values``, ``logits``: the action is their argmax over the last axis) or to the action
itself (``action``: continuous actions, already in the env's bounds), with the batch size free.
A run with action masks (``collector.action_mask_key``) exports
:class:`~services.policy.heads.MaskedHead` instead: a second input ``action_mask`` ``[B, width]``
(bool), and forbidden actions score the dtype's minimum, so the argmax is an allowed action.
A multi-agent policy's mask input is one mask per agent, ``[B, n_agents, n_actions]``.

* ``pt2``: ``torch.export.export`` then ``torch.export.save``; load it with
  ``torch.export.load(path).module()`` (torch only).
* ``onnx``: the same program through ``torch.onnx.export(..., dynamo=True)``; run it with
  ``onnxruntime.InferenceSession(path)`` (the ``onnx`` extra: ``pip install "relayrl[onnx]"``).

:func:`export_policy` writes the file, loads it back and checks it against the policy on a batch
of observations drawn from the observation space (to 1e-5, relative and absolute: float32 Q-values
in the hundreds round at 1e-5), and returns what it wrote.

Examples:
    >>> policy = load_policy("~/relayrl_results/<run id>")  # doctest: +SKIP
    >>> export_policy(policy, "pt2", "policy.pt2")["output"]  # doctest: +SKIP
    {'name': 'q_values', 'shape': ['batch', 2], 'dtype': 'float32'}
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from services.policy.heads import MaskedHead

FORMATS = ("pt2", "onnx")
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
ONNX_EXTRA = 'pip install "relayrl[onnx]"'
TOLERANCE = 1e-5


class ExportError(RuntimeError):
    """The exported file could not be written or does not match the policy."""


def missing_onnx_packages() -> list[str]:
    """The ``onnx`` extra's packages that are not installed."""
    return [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]


def example_observations(policy, batch: int = 4, seed: int = 0) -> torch.Tensor:
    """A batch of observations drawn from the policy's observation space (seeded)."""
    space = policy.observation_space
    if isinstance(space, gym.spaces.Dict):
        space = space["observation"]
    rng = np.random.default_rng(seed)
    if space.dtype == np.uint8:
        array = rng.integers(0, 256, size=(batch, *space.shape), dtype=np.uint8)
    else:
        low = np.where(np.isfinite(space.low), space.low, -3.0)
        high = np.where(np.isfinite(space.high), space.high, 3.0)
        array = rng.uniform(low, high, size=(batch, *space.shape)).astype(np.float32)
    return torch.as_tensor(array, device=policy.device)


def example_masks(policy, batch: int = 4, seed: int = 0) -> torch.Tensor | None:
    """Random masks (each allowing at least one action) for a masked run's policy, else None.

    ``[batch, width]``, or ``[batch, n_agents, n_actions]`` for a multi-agent policy.
    """
    if policy.mask_key is None:
        return None
    from collector.envs.masks import mask_width

    rng = np.random.default_rng(seed + 1)
    space = policy.action_space
    if policy.family == "agents":  # one mask per agent (collector.envs.multiagent)
        shape: tuple[int, ...] = (len(space.nvec), int(space.nvec[0]))
    else:
        shape = (mask_width(space),)
    mask = rng.random((batch, *shape)) < 0.5
    mask[..., 0] |= ~mask.any(-1)
    return torch.as_tensor(mask, device=policy.device)


def _export_program(policy, inputs: tuple[torch.Tensor, ...]):
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    dynamic = tuple({0: batch} for _ in inputs)
    module = policy.head if len(inputs) == 1 else MaskedHead(policy.head)
    with warnings.catch_warnings():  # torch's own deprecations inside export
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        return torch.export.export(module, inputs, dynamic_shapes=dynamic)


def _run_file(fmt: str, out: Path, inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    if fmt == "pt2":
        module = torch.export.load(str(out)).module()
        with torch.inference_mode():
            return module(*inputs).cpu().numpy()
    import onnxruntime

    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    names = [arg.name for arg in session.get_inputs()]
    feeds = {name: x.cpu().numpy() for name, x in zip(names, inputs, strict=True)}
    return session.run(None, feeds)[0]


def export_policy(policy, fmt: str, out: str | Path, *, batch: int = 4) -> dict[str, Any]:
    """Writes the policy's head as ``fmt`` to ``out`` and checks the file against the policy.

    Args:
        policy: A :class:`~services.policy.policy.Policy`.
        fmt: ``pt2`` or ``onnx``.
        out: The file to write (its directory is created).
        batch: Observations in the check (and the example the export traces).

    Returns:
        ``format``, ``out`` (absolute), ``bytes``, ``input`` and ``output`` (name, shape with
        ``"batch"`` first, dtype), ``discrete`` (actions are the argmax of the output),
        ``max_abs_diff`` between the file's output and the policy's.

    Raises:
        ValueError: For an unknown format, ``onnx`` without the ``onnx`` extra, or a policy
            over a ``Dict`` observation (exports take one tensor).
        ExportError: If the export fails or the file's output differs by more than 1e-5 (relative
            and absolute).
    """
    if fmt not in FORMATS:
        raise ValueError(f"--format: must be one of {FORMATS}, got {fmt!r}")
    if fmt == "onnx" and (missing := missing_onnx_packages()):
        raise ValueError(f"--format onnx: needs {', '.join(missing)}: {ONNX_EXTRA}")
    if getattr(policy, "structured", None) is not None:
        raise ValueError(
            f"--format {fmt}: the policy takes a Dict observation "
            f"({list(policy.structured.layout.keys)}); exports take one observation tensor, so "
            "use load_policy(...).act for Dict observations"
        )
    out = Path(out).expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    example = example_observations(policy, batch)
    masks = example_masks(policy, batch)
    inputs = (example,) if masks is None else (example, masks)
    input_names = ["observation"] if masks is None else ["observation", "action_mask"]
    expected = policy.forward(example, masks).cpu().numpy()
    head = policy.head
    try:
        program = _export_program(policy, inputs)
        if fmt == "pt2":
            torch.export.save(program, str(out))
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                warnings.simplefilter("ignore", UserWarning)
                onnx_program = torch.onnx.export(
                    program,
                    inputs,
                    dynamo=True,
                    input_names=input_names,
                    output_names=[head.output],
                    verbose=False,
                )
            onnx_program.save(str(out))
        got = _run_file(fmt, out, inputs)
    except Exception as err:  # torch.export / ONNX conversion of the user's network
        name = type(policy.network).__name__
        raise ExportError(f"{fmt}: exporting {name} failed: {err}") from err
    diff = float(np.max(np.abs(got.astype(np.float64) - expected))) if expected.size else 0.0
    close = np.allclose(got, expected, rtol=TOLERANCE, atol=TOLERANCE)
    if got.shape != expected.shape or not close:
        raise ExportError(
            f"{out}: the exported {fmt} gives {got.shape} differing by {diff:.3g} from the policy "
            f"(tolerance {TOLERANCE}, relative and absolute)"
        )
    return {
        "format": fmt,
        "out": str(out),
        "bytes": out.stat().st_size,
        "input": {
            "name": "observation",
            "shape": ["batch", *policy.observation_shape],
            "dtype": str(example.dtype).removeprefix("torch."),
        },
        **(
            {}
            if masks is None
            else {
                "mask": {
                    "name": "action_mask",
                    "shape": ["batch", *masks.shape[1:]],
                    "dtype": "bool",
                }
            }
        ),
        "output": {
            "name": head.output,
            "shape": ["batch", *expected.shape[1:]],
            "dtype": str(expected.dtype),
        },
        "discrete": head.discrete,
        "max_abs_diff": diff,
    }
