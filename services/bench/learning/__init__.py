"""Benchmarks of learning: frames and seconds to a task's threshold against published references.

``solve``, ``learn`` (its entries: :mod:`.learn_suite`; its plots: :mod:`.learn_plot`) and ``marl``.
"""
