"""The driver side of relayrl: the commands users type, and one room per concern below them.

Commands (``python -m services.<name>``, or ``relayrl <name>`` once installed: ``cli``):
    * ``train``: one training job (``--config``, ``--set``, ``--resume``).
    * ``sweep``: several runs at once on one cluster (``--seeds``, ``--grid``).
    * ``evaluate``: play a trained policy, print its returns, record videos.
    * ``export``: write a trained policy's forward as ``pt2`` or ONNX.
    * ``plot``: learning curves from a run directory's ``metrics.jsonl``.
    * ``scale``: resize a running job over gRPC (``Control/Scale``): collectors, replay shards,
      learner world size.
    * ``external_actor``: an example actor outside Ray, fed over gRPC.
    * ``bench``: ``python -m services.bench <name>``, driver-side benchmarks.
    * ``cli``: the ``relayrl`` command (``[project.scripts]``), one subcommand per module.

The Python API: :class:`Trainer` (``services.run.trainer``) trains a config (a file, a dict or a
``RunConfig``) with typed callbacks; :func:`load_policy` and :class:`Policy`
(``services.policy``) load a trained policy without Ray.

Rooms:
    * ``driver``: the :class:`~services.driver.controller.Controller` (receipts in, counters
      and references out, never batches), its loops (``offpolicy``, ``onpolicy``), frame
      accounting, checkpoint and progress cadence, hooks, the typed views of the run, the gRPC
      inbox, fault recovery, service placement, live resizes (``elastic``) and the run's
      counters.
    * ``config``: :class:`RunConfig` (frozen sections validated on construction), the YAML
      loader with ``--set`` overrides, the algorithm recipes and their checks, the network spec
      a run's env calls for.
    * ``checkpoints``: the on-disk store (staging, manifest, rotation, newest valid), the
      consistent cut and the ordered restore, resume compatibility, retention by metric, state
      files without pickle.
    * ``grpc``: the driver's gRPC server (``relayrl.v1.Control`` and ``Experience``), its
      servicers, the driver-path insert, direct writes' driver side, the Python client.
    * ``observe``: Prometheus metrics, progress lines, TensorBoard, snapshots and the summary,
      early stopping, the sweep's tables and plots.
    * ``evaluation``: the greedy-evaluation schedule (pure) and the evaluator actor.
    * ``run``: one run's life (launch, run directory, storage root), the embedded Ray in its own
      session, the Ray toolbox, the Python API's ``Trainer`` and its callbacks' payloads.
    * ``policy``: a trained policy outside Ray: loading, per-family actions, frame stacks,
      multi-agent features, export.

The wire contract that both the driver and a replay shard speak (the Experience proto, the
zero-copy reader, batch specs and codecs, the shard-side intake) lives below, in
``replay.wire`` and ``replay.intake``. Nothing outside ``services`` imports it.
"""

from __future__ import annotations

import importlib

# Loaded on first use: ``services.config`` alone (the CLI's first step) needs no torch.
_EXPORTS = {
    "ConfigError": "services.config",
    "Controller": "services.driver.controller",
    "Policy": "services.policy",
    "RunConfig": "services.config",
    "Trainer": "services.run.trainer",
    "load_config": "services.config",
    "load_policy": "services.policy",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Imports an exported name's module on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
