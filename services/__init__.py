"""The driver side of relayrl.

Layout:
    * ``config``: :class:`RunConfig`, the frozen per-component configs composed into one, loaded
      from YAML plus ``--set`` overrides and validated before any actor starts.
    * ``spec``: the Q-network spec read from the env's spaces.
    * ``controller``: :class:`Controller`, the thin frame-accounting loop (see its docstring):
      receipts in, counters and references out, never batches.
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
      ``metrics.jsonl``, ``summary.json``); ``plot``: ``python -m services.plot RUN_DIR``.
    * ``launch``: one run start to finish (id, directory, logs, endpoint, controller), shared
      by the CLI and the sweep.
    * ``train``: the CLI, ``python -m services.train`` (``--config``, ``--set``, ``--resume``).
    * ``sweep``: ``python -m services.sweep --seeds 0,1,2 [--grid KEY=V1,V2]``, concurrent runs
      on one cluster; ``sweep_report``: its tables and its return-vs-frames plot across seeds.
    * ``checkpoint_bench``: ``python -m services.checkpoint_bench``.

Nothing outside ``services`` imports it.
"""

from services.config import ConfigError, RunConfig, load_config
from services.controller import Controller

__all__ = ["ConfigError", "Controller", "RunConfig", "load_config"]
