"""Checkpoints: the on-disk store, consistent cuts and restores, resume, retention."""
