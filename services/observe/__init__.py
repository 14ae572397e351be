"""Watching a run: Prometheus metrics, progress, TensorBoard, reports, early stopping.

Layout:
    * ``metrics``: the Prometheus exporter (``relayrl_*`` series, ``file_sd`` targets);
    * ``catalog``: every exported metric's name, type, labels and help (the docs table);
      ``nodes``: the ``node`` label of a Ray node.
    * ``progress``: progress lines or a bar; ``report``: snapshots and the final summary;
      ``clock``: the process's start, behind ``startup_s``; ``digest``: the summary's
      ``digest`` of the learner state and replay contents (``run.deterministic``).
    * ``tensorboard``: optional TensorBoard logging.
    * ``early_stop``: early stopping on a logged metric (pure).
    * ``runlog``: a run's ``metrics.jsonl`` read back (``services.plot`` and the sweep use it);
      ``sweep_report``: the sweep's tables and plot.
"""
