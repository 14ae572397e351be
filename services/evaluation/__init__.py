"""Greedy evaluation: the schedule (pure), the evaluator actor, and playing a loaded policy.

Modules:
    * ``schedule``: when to evaluate, the evaluation seeds, the episode loop (pure).
    * ``evaluator``: the evaluator actor and its driver-side runner.
    * ``envs``: the run's evaluation env, built as the collectors build theirs (multi-agent too).
    * ``playback``: a loaded policy's episodes and videos (``python -m services.evaluate``).
"""
