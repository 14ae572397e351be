"""The driver side of relayrl.

Layout:
    * ``config``: :class:`RunConfig`, the frozen per-component configs composed into one, loaded
      from YAML plus ``--set`` overrides and validated before any actor starts.
    * ``spec``: the Q-network spec read from the env's spaces.
    * ``controller``: :class:`Controller`, the thin frame-accounting loop (see its docstring):
      receipts in, counters and references out, never batches.
    * ``stats``: driver counters, the episode window, rates; ``early_stop``: early stopping on
      a logged metric.
    * ``checkpoint``: the on-disk format (staging directory, manifest with sizes and SHA-256
      written last, atomic rename, rotation, verification, newest-valid fallback);
      ``checkpointing``: the consistent cut (drain, pause barrier, parallel dumps) and the
      ordered restore (replay, collectors, driver counters, learners as a new generation);
      ``statefile``: JSON + ``.npz`` states without pickle.
    * ``metrics``: the Prometheus exporter (``relayrl_*``), fed by controller hooks;
      ``progress``: tqdm bar or plain lines; ``tensorboard``: optional scalars;
      ``rundir``: the run directory (``config.yaml``, ``metrics.jsonl``); ``plot``:
      ``python -m services.plot RUN_DIR``.
    * ``train``: the CLI, ``python -m services.train`` (``--config``, ``--set``, ``--resume``).
    * gRPC (``grpc.port``): ``grpc_config``: the ``grpc`` config section;
      ``proto/relayrl/v1``: ``relayrl.proto`` and its checked-in generated modules;
      ``grpc_server``: the server (token auth, health, reflection, limits) and
      ``grpc_services``: its ``Control`` and ``Experience`` servicers; ``grpc_insert``: the
      replay side of inserts (routing, coalesced shard calls, shared memory); ``control``: the
      thread-safe :class:`~services.control.Inbox` through which they reach the driver loop
      (external receipts to count, checkpoint and stop requests, status); ``external``: the
      run's transition spec, batch checks and tensor codecs; ``grpc_client``:
      :class:`~services.grpc_client.RelayClient`; ``external_actor``: an example actor outside
      Ray, ``python -m services.external_actor``.
    * ``checkpoint_bench``: ``python -m services.checkpoint_bench``; ``bench``: ``python -m
      services.bench grpc`` (external insert throughput against a raw gRPC stream).

Nothing outside ``services`` imports it.
"""

from services.config import ConfigError, RunConfig, load_config
from services.controller import Controller

__all__ = ["ConfigError", "Controller", "RunConfig", "load_config"]
