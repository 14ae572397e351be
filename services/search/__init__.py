"""Adaptive search over relayrl runs on Ray Tune (``python -m services.tune``).

Modules:
    * ``space``: the ``--space`` YAML (distributions, grids) parsed and checked before anything
      starts (no Ray, no Tune);
    * ``trial``: :class:`~services.search.trial.RelayTrial`, the ``tune.Trainable`` shell of one
      relayrl run (progress as results with ``frames`` the time attribute, the run's consistent
      checkpoints as Tune's, PBT exploits as resumes with the mutated config);
    * ``schedulers``: ``pbt``, ``pb2``, ``asha``, ``fifo`` as Tune schedulers;
    * ``results``: ``trials.csv``, ``best.json`` and the return-vs-frames plot.

Tune is the ``tune`` extra (``pip install "relayrl[tune]"``); only ``trial``, ``schedulers``
and the command import it.
"""
