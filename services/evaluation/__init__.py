"""Greedy evaluation: the schedule (pure) and the evaluator actor."""
