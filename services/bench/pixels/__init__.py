"""Benchmarks of the pixel data path: ``atari``.

Its Pong task is :mod:`.pong`; ``--compile`` runs :mod:`.compiled`.
"""
