"""Watching a run: Prometheus metrics, progress, TensorBoard, reports, early stopping."""
