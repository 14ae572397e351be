"""The driver: the controller, its loops, the gRPC inbox, fault recovery and placement.

Layout:
    * ``controller``: :class:`~services.driver.controller.Controller`, the run's thin runtime
      (setup and ordered restore, receipts in, weights out, stop requests, checkpoints, progress).
    * ``loops``: what each algorithm issues next: ``offpolicy`` (UTD pacing) and ``onpolicy``;
      ``deterministic`` (``run.deterministic``: ticks scheduled by counts, shards committed).
    * ``inflight``: :class:`InFlight`, the rollouts in flight by ticket: counts, free slots,
      overdue rollouts, at a cost per event that does not grow with the fleet (pure).
    * ``accounting``: :class:`Accounting`, frames, episodes and return milestones counted from
      rollout, external and step receipts (pure).
    * ``cadence``: when periodic checkpoints and progress snapshots are due (pure, own clock).
    * ``hooks``: the loop-boundary events and their registry, ``hook(controller, *args)`` (pure).
    * ``views``: typed views of the run (``Protocol``), one per part that reads it; ``ports``:
      the run's parts as a view hands them out (inbox, recovery, resizes, evaluation); both
      checked by ``mypy`` (``[tool.mypy]`` in ``pyproject.toml``).
    * ``stats``: :class:`RunCounters`, the episode window and the rate meter (pure).
    * ``actors``: starting the run's collector group and learner group.
    * ``placement``: the services' placement group (collectors and replay shards) per run.
    * ``inbox``: requests from gRPC threads served at loop boundaries (external writes counted).
    * ``recovery``: the driver's reactions to faults (dead collectors, env errors, shard restarts).
    * ``elastic``: live resizes (collectors, replay shards, world size) at safe boundaries,
      ``Control/Scale`` requests, resize events; ``sizes``: a run's three sizes and the config
      that has them; ``autoscale``: ``collector.num_collectors: auto``, a fleet that follows the
      cluster's CPUs and drops a lost node's collectors.
    * ``faults``: the pure fault monitors (shard health, crash loops, attribution to nodes),
      ``ComponentFailure`` and ``DeterminismError``.
"""
