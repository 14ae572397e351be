"""Exporting a policy's forward to a file that runs without relayrl: ``pt2`` and ONNX.

The exported function is the policy's :class:`~services.policy.heads.PolicyHead`: a batch of
observations ``observation`` ``[B, *obs_shape]`` (float32, or uint8 frames) to action scores
(``q_values``, ``logits``: the action is their argmax over the last axis) or to the action
itself (``action``: continuous actions, already in the env's bounds), with the batch size free.
A run with action masks (``collector.action_mask_key``) exports
:class:`~services.policy.heads.MaskedHead` instead: a second input ``action_mask`` ``[B, width]``
(bool), and forbidden actions score the dtype's minimum, so the argmax is an allowed action.
A multi-agent policy's mask input is one mask per agent, ``[B, n_agents, n_actions]``.

A recurrent policy (``learner.recurrent``) takes its state too and returns the next one: inputs
``observation``, ``state`` ``[B, state_size]`` float32 (zeros at an episode's first step) and,
in a masked run, ``action_mask``; outputs the scores (or action) and ``next_state``
``[B, state_size]``, the state to feed with the next observation
(:class:`~services.policy.heads.RecurrentMaskedHead`).

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

from services.policy.heads import MaskedHead, RecurrentMaskedHead

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


def example_states(policy, batch: int = 4, seed: int = 0) -> torch.Tensor | None:
    """States ``[batch, state_size]`` in ``[-1, 1]`` (seeded) for a recurrent policy, else None."""
    if not getattr(policy, "recurrent", False):
        return None
    rng = np.random.default_rng(seed + 2)
    states = rng.uniform(-1, 1, size=(batch, policy.states.state_size)).astype(np.float32)
    return torch.as_tensor(states, device=policy.device)


def _export_module(policy, masked: bool) -> torch.nn.Module:
    if policy.recurrent:
        return RecurrentMaskedHead(policy.head) if masked else policy.head
    return MaskedHead(policy.head) if masked else policy.head


def _export_program(policy, inputs: tuple[torch.Tensor, ...], masked: bool):
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    dynamic = tuple({0: batch} for _ in inputs)
    module = _export_module(policy, masked)
    with warnings.catch_warnings():  # torch's own deprecations inside export
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        return torch.export.export(module, inputs, dynamic_shapes=dynamic)


def _run_file(fmt: str, out: Path, inputs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    """The file's outputs on ``inputs`` (one, or the scores and ``next_state``)."""
    if fmt == "pt2":
        module = torch.export.load(str(out)).module()
        with torch.inference_mode():
            got = module(*inputs)
        return [x.cpu().numpy() for x in (got if isinstance(got, tuple | list) else (got,))]
    import onnxruntime

    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    names = [arg.name for arg in session.get_inputs()]
    feeds = {name: x.cpu().numpy() for name, x in zip(names, inputs, strict=True)}
    return list(session.run(None, feeds))


def _spec(name: str, shape, dtype) -> dict[str, Any]:
    return {"name": name, "shape": ["batch", *shape], "dtype": str(dtype).removeprefix("torch.")}


def export_policy(policy, fmt: str, out: str | Path, *, batch: int = 4) -> dict[str, Any]:
    """Writes the policy's head as ``fmt`` to ``out`` and checks the file against the policy.

    Args:
        policy: A :class:`~services.policy.policy.Policy`.
        fmt: ``pt2`` or ``onnx``.
        out: The file to write (its directory is created).
        batch: Observations in the check (and the example the export traces).

    Returns:
        ``format``, ``out`` (absolute), ``bytes``, ``input`` and ``output`` (name, shape with
        ``"batch"`` first, dtype), ``mask`` (masked runs), ``state`` and ``next_state``
        (recurrent policies: the second input and output), ``discrete`` (actions are the argmax
        of the output), ``max_abs_diff`` between the file's outputs and the policy's.

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
    states = example_states(policy, batch)
    named = [("observation", example), ("state", states), ("action_mask", masks)]
    named = [(name, x) for name, x in named if x is not None]
    inputs = tuple(x for _, x in named)
    input_names = [name for name, _ in named]
    head = policy.head
    output_names = [head.output] if states is None else [head.output, "next_state"]
    forward = policy.forward(example, masks, states) if states is not None else None
    outputs = forward if forward is not None else (policy.forward(example, masks),)
    expected = [x.cpu().numpy() for x in outputs]
    try:
        program = _export_program(policy, inputs, masks is not None)
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
                    output_names=output_names,
                    verbose=False,
                )
            onnx_program.save(str(out))
        got = _run_file(fmt, out, inputs)
    except Exception as err:  # torch.export / ONNX conversion of the user's network
        name = type(policy.network).__name__
        raise ExportError(f"{fmt}: exporting {name} failed: {err}") from err
    if len(got) != len(expected):
        raise ExportError(
            f"{out}: the exported {fmt} gives {len(got)} outputs, not {len(expected)}"
        )
    diff = 0.0
    for name, value, want in zip(output_names, got, expected, strict=True):
        same = value.shape == want.shape
        if same and want.size:
            diff = max(diff, float(np.max(np.abs(value.astype(np.float64) - want))))
        if not same or not _close(value, want):
            raise ExportError(
                f"{out}: the exported {fmt} gives {name} {value.shape} differing by {diff:.3g} "
                f"from the policy (tolerance {TOLERANCE}, relative and absolute)"
            )
    result = {
        "format": fmt,
        "out": str(out),
        "bytes": out.stat().st_size,
        "input": _spec("observation", policy.observation_shape, example.dtype),
        "output": _spec(head.output, expected[0].shape[1:], expected[0].dtype),
        "discrete": head.discrete,
        "max_abs_diff": diff,
    }
    if masks is not None:
        result["mask"] = _spec("action_mask", masks.shape[1:], "bool")
    if states is not None:
        result["state"] = _spec("state", states.shape[1:], "float32")
        result["next_state"] = _spec("next_state", states.shape[1:], "float32")
    return result


def _close(got: np.ndarray, expected: np.ndarray) -> bool:
    return bool(np.allclose(got, expected, rtol=TOLERANCE, atol=TOLERANCE))
