"""Checkpoints: the on-disk store, consistent cuts and restores, resume, retention, trust.

``trust``: what loading a checkpoint trusts (signatures, the code its config names).
"""
