"""Benchmarks of the running service: faults, checkpoints, fleets, determinism, resizes, async.

``soak``, ``checkpoint``, ``scale`` (its simulated fleet: :mod:`.sim`), ``determinism``,
``elastic``, ``startup`` and ``async`` (:mod:`.async_bench`).
"""
