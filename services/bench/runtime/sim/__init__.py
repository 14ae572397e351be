"""The simulated fleet of ``python -m services.bench scale``: the driver against programmed peers.

* :mod:`services.bench.runtime.sim.controller`: the production controller whose setup starts
  simulated collectors, shards and a learner instead of real ones;
* :mod:`services.bench.runtime.sim.fleet`: those simulated actors (no torch, no driver),
  answering with real receipts at programmed rates.
"""
