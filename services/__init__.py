"""The driver side of relayrl.

Layout:
    * ``config``: :class:`RunConfig`, the frozen per-component configs composed into one, loaded
      from YAML plus ``--set`` overrides and validated before any actor starts.
    * ``algorithms``: the recipes behind ``algorithm: dqn | ppo | a2c | reinforce | sac | iql |
      vdn | qmix``: each picks a loop, a loss and a collector policy, fills the config fields
      left unset, and refuses combinations that cannot work (naming the field) before any actor
      starts; ``multiagent``: the multi-agent recipes' defaults (Spread), refusals, env spaces
      and agent network spec.
    * ``spec``: the model spec the algorithm builds from the env's spaces.
    * ``controller``: :class:`Controller`, the run's shared runtime (see its docstring):
      receipts in, counters and references out, never batches; setup starts every actor at
      once and restores services before learners.
    * ``loops``: the per-algorithm schedule: ``offpolicy`` (asynchronous collection, learner
      rounds paced by the update-to-data ratio) and ``onpolicy`` (lockstep iterations with
      policy lag 0: collect, train epochs of minibatches on exactly that batch, publish).
    * ``runid``: the unique run id ``<run.name>-<YYYYmmdd-HHMMSS>-<token>`` that names a run's
      actors (``<run id>.collector-0``), directory and ``run`` metrics label; a resumed run gets
      a new id and keeps the checkpoint's lineage.
    * ``placement``: the per-run reservation of the collectors' and shards' resources (one
      placement group ``<run id>.services``), failing with the resources named when the cluster
      cannot place it within ``learner.setup_timeout_s``.
    * ``stats``: driver counters, the episode window, rates; ``early_stop``: early stopping on
      a logged metric.
    * ``checkpoint``: the on-disk format (staging directory, manifest with sizes and SHA-256
      written last, atomic rename, rotation, verification, newest-valid fallback);
      ``checkpointing``: the consistent cut (drain, pause barrier, parallel dumps) and the
      ordered restore (replay, collectors, driver counters, learners as a new generation);
      ``statefile``: JSON + ``.npz`` states without pickle.
    * ``metrics``: the Prometheus exporter (``relayrl_*``), fed by controller hooks;
      ``progress``: tqdm bar or plain lines; ``tensorboard``: optional scalars;
      ``rundir``: the run directory ``<run.storage>/<run id>`` (``config.yaml``,
      ``metrics.jsonl``, ``summary.json``); ``storage``: the storage root (``run.storage``,
      ``$RELAYRL_STORAGE``, ``~/relayrl_results``), kept out of a job's working directory;
      ``plot``: ``python -m services.plot RUN_DIR``.
    * ``evaluation``: the ``evaluation`` section and the pure evaluation schedule (due
      intervals, coalescing, end-of-run evaluation, checkpoint state) and exact greedy
      episodes; ``evaluator``: the evaluator actor and its driver-side runner;
      ``retention``: checkpoint rotation that keeps the ``keep_best`` best by a metric.
    * ``raytools``: the ``ray`` config section (the embedded Ray's dashboard) and the logged
      cluster address and dashboard URL for ``ray list actors``.
    * ``launch``: one run start to finish (id, directory, logs, endpoint, controller), shared
      by the CLI and the sweep.
    * ``train``: the CLI, ``python -m services.train`` (``--config``, ``--set``, ``--resume``).
    * ``sweep``: ``python -m services.sweep --seeds 0,1,2 [--grid KEY=V1,V2]``, concurrent runs
      on one cluster; ``sweep_report``: its tables and its return-vs-frames plot across seeds.
    * ``checkpoint_bench``: ``python -m services.checkpoint_bench``; ``bench``:
      ``python -m services.bench solve`` (time to solve from process start, per algorithm) and
      ``python -m services.bench grpc`` (external insert throughput against a raw gRPC stream),
      ``atari`` (the pixel data path) and ``soak`` (faults injected on a schedule).
    * ``faults``: the driver's side of the failure model: non-blocking replay shard health
      checks (a restarted shard is refilled from the latest checkpoint and its items counted as
      lost), the crash-loop rule, and the node names in failure messages; ``recovery``: the
      controller's reactions (collector deaths and crash loops, env errors, stuck rollouts
      killed, shards refilled, every shard answering before a cut).
    * ``embedded``: the embedded local Ray's processes in a session of their own, so a signal
      to the driver's process group stops the run cleanly instead of killing the cluster.
    * ``clock``: this process's start time (start-up and time-to-solve figures).
    * gRPC (``grpc.port``): ``grpc_config``: the ``grpc`` config section;
      ``proto/relayrl/v1``: ``relayrl.proto`` and its checked-in generated modules;
      ``grpc_server``: the server (token auth, health, reflection, limits) and
      ``grpc_services``: its ``Control`` and ``Experience`` servicers; ``grpc_insert``: the
      replay side of inserts (routing, coalesced shard calls, shared memory); ``wire``: the
      zero-copy reader of Insert messages both servers use; ``heap``: glibc thresholds that
      keep freed megabyte buffers for reuse; ``shard_intake`` and ``direct_writes``
      (``grpc.direct_writes``): replay shards that serve Insert themselves, gated, held around
      cuts and counted by the driver; ``control``: the
      thread-safe :class:`~services.control.Inbox` through which they reach the driver loop
      (external receipts to count, checkpoint and stop requests, status); ``external``: the
      run's transition spec, batch checks and tensor codecs; ``grpc_client``:
      :class:`~services.grpc_client.RelayClient`; ``external_actor``: an example actor outside
      Ray, ``python -m services.external_actor``.

Nothing outside ``services`` imports it.
"""

from __future__ import annotations

import importlib

# Loaded on first use: ``services.config`` alone (the CLI's first step) needs no torch.
_EXPORTS = {
    "ConfigError": "services.config",
    "Controller": "services.controller",
    "RunConfig": "services.config",
    "load_config": "services.config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Imports an exported name's module on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
