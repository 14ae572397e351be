"""A deterministic run's learner side: deterministic kernels and the digest of a learner's state.

:func:`deterministic_kernels` is what ``run.deterministic`` sets in every rank before its
network is built: ``torch.use_deterministic_algorithms(True)`` (an op with no deterministic
kernel then raises, naming itself, instead of running nondeterministically), a fixed number of
intra-op threads (a float reduction split over another number of threads sums in another
order), and on CUDA cuDNN's deterministic algorithms without autotuning and cuBLAS's fixed
workspace (``CUBLAS_WORKSPACE_CONFIG=:4096:8``, which must be set before the first cuBLAS call;
the rank sets it before it touches the device). The CUDA settings are selected by the config
and not exercised by the CPU-only test suite.

:func:`state_digest` hashes what a trained learner is: its loss module's parameters and buffers
(policy, critics, targets), its stepper's state (optimizers, schedulers, scalers) and its
model version, so two runs compare by one string (``replay.digest`` does the same for replay).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from replay.digest import Digest

CUBLAS_WORKSPACE = ":4096:8"


def deterministic_kernels(device: str | torch.device = "cpu", *, threads: int = 1) -> dict:
    """Selects deterministic kernels and fixed thread counts in this process.

    Args:
        device: The rank's device; ``cuda`` also selects cuDNN's and cuBLAS's settings.

    Keyword Args:
        threads: Intra-op threads (``torch.set_num_threads``).

    Returns:
        What was set, for the rank's ``describe``.

    Examples:
        >>> settings = deterministic_kernels("cpu")
        >>> torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
        (True, 1)
        >>> torch.use_deterministic_algorithms(False)  # this doctest's process goes on as before
    """
    settings: dict[str, Any] = {"threads": threads}
    if torch.device(device).type == "cuda":
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        settings["cublas_workspace"] = CUBLAS_WORKSPACE
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)
    settings["deterministic_algorithms"] = True
    return settings


def state_digest(state: Mapping) -> str:
    """SHA-256 of a ``LearnerCore.state_dict()``: ``loss``, ``stepper`` and ``version``.

    RNG states are left out (they are streams, not what was learned).

    Examples:
        >>> net = torch.nn.Linear(2, 1)
        >>> opt = torch.optim.Adam(net.parameters())
        >>> state = {"loss": net.state_dict(), "stepper": {"optimizer": opt.state_dict()},
        ...          "version": 0}
        >>> state_digest(state) == state_digest(state)
        True
    """
    digest = Digest()
    for part in ("loss", "stepper", "version"):
        _add(digest, part, state.get(part))
    return digest.hexdigest()


def _add(digest: Digest, name: str, value: Any) -> None:
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            _add(digest, f"{name}/{key}", value[key])
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _add(digest, f"{name}/{i}", item)
        digest.add(f"{name}/len", len(value))
    elif isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        if tensor.dtype in (torch.bfloat16, torch.float16):
            array = tensor.view(torch.int16).numpy()
        else:
            array = tensor.numpy()
        digest.add(f"{name}|{tensor.dtype}", array)
    elif (
        isinstance(value, np.ndarray)
        or value is None
        or isinstance(value, bool | int | float | str)
    ):
        digest.add(name, value)
    else:
        digest.add(name, repr(value))
