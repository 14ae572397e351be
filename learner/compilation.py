"""Optional ``torch.compile`` of the learner's policy network (``learner.compile``).

The network is compiled in place: its ``__call__`` runs a compiled function while the module,
its parameters and its ``state_dict`` keys stay what they were (no ``_orig_mod.`` prefix), so
published weights, checkpoints and resumes have the same format with and without compile.
The loss keeps calling the same module object, and a rank's DDP wrapper (around the loss)
averages the gradients the compiled backward produces, as it does in eager mode.

``nn.Module.compile`` is not used: it compiles ``Module._call_impl``, a frame Dynamo skips, so
on torch 2.13 a network that is an ``nn.Sequential`` of built-in layers (our Q-networks) is
silently left uncompiled (pytorch/pytorch#150915). A function of ours that calls
``_call_impl`` is traced instead, with the same effect (forward hooks included).
"""

from __future__ import annotations

import inspect
import sys

import torch
from torch import nn


def compile_unsupported_reason() -> str | None:
    """Why this torch cannot compile, or None when it can.

    Returns:
        A sentence naming the torch and Python versions, or None.
    """
    compile_fn = getattr(torch, "compile", None)
    if compile_fn is None:
        return f"torch {torch.__version__} has no torch.compile (needs torch>=2.2)"
    from torch import _dynamo  # imported on demand: a plain run never loads Dynamo

    if not _dynamo.is_dynamo_supported():
        python = ".".join(map(str, sys.version_info[:3]))
        return f"torch {torch.__version__} has no Dynamo support on Python {python}"
    return None


def compile_in_place(module: nn.Module, *, mode: str, backend: str) -> None:
    """Makes ``module(...)`` run through ``torch.compile``; the module object stays the same.

    Compilation happens on the first call (and again for new input shapes or dtypes).

    Args:
        module: The network to compile.
        mode: A torch.compile mode (``default``, ``reduce-overhead``, ``max-autotune``, ...);
            only the ``inductor`` backend reads it.
        backend: ``inductor``, ``aot_eager`` or ``eager`` (Dynamo tracing only).

    Examples:
        >>> net = nn.Sequential(nn.Linear(4, 2))
        >>> compile_in_place(net, mode="default", backend="eager")
        >>> list(net.state_dict())
        ['0.weight', '0.bias']
    """
    call = module._call_impl  # hooks + forward, without the compiled-call indirection

    def compiled_call(*args, **kwargs):
        return call(*args, **kwargs)

    options: dict = {"backend": backend}
    if backend == "inductor":
        options["mode"] = mode
    if "isolate_recompiles" in inspect.signature(torch.compile).parameters:
        # Each network keeps its own recompile budget (they all share compiled_call's code).
        options["isolate_recompiles"] = True
    module._compiled_call_impl = torch.compile(compiled_call, **options)


def compile_policy(policy_network: nn.Module, config) -> bool:
    """Compiles the policy network as ``config.compile`` and ``config.compile_backend`` say.

    Args:
        policy_network: The network the loss calls (DQN's online Q-network, the actor-critic
            of PPO/A2C/REINFORCE, SAC's actor, the multi-agent network).
        config: The :class:`learner.config.LearnerConfig`.

    Returns:
        Whether it was compiled (False with ``compile: off``).
    """
    if config.compile == "off":
        return False
    compile_in_place(policy_network, mode=config.compile, backend=config.compile_backend)
    return True
