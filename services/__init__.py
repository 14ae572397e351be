"""The driver side of relayrl.

Layout:
    * ``config``: :class:`RunConfig`, the frozen per-component configs composed into one, loaded
      from YAML plus ``--set`` overrides and validated before any actor starts.
    * ``controller``: :class:`Controller`, the thin frame-accounting loop (see its docstring).
    * ``stats``: driver counters and the episode window.
    * ``metrics``: the Prometheus exporter (``relayrl_*``), fed by controller hooks.
    * ``rundir``: the run directory (resolved ``config.yaml``, ``metrics.jsonl``).
    * ``train``: the CLI, ``python -m services.train``.

Nothing outside ``services`` imports it.
"""

from services.config import ConfigError, RunConfig, load_config
from services.controller import Controller

__all__ = ["ConfigError", "Controller", "RunConfig", "load_config"]
