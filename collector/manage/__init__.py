"""The driver's side of the collectors: starting, addressing, dispatching to and resizing them.

* ``group``: :class:`CollectorGroup`, the run's named collector actors: rollouts by ticket,
weights hand-off, the pause barrier, state, restarts.
* ``remote``: starting one named Collector actor with its threads and options.
* ``fleet``: :class:`Fleet`, collectors joining and leaving a running group (live resizes).
* ``dispatch``: one driver call per rollout; ``hub``: per-node rollout hubs batching orders
and receipts both ways; ``completions``: finished rollouts as a queue.
* ``restarts``: :class:`DeathLedger`, which failed rollouts are new deaths (pure).
"""
