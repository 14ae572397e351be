"""The run's hooks: callbacks at the driver loop's boundaries (pure, no Ray).

A hook is ``hook(subject, *args)``, where ``subject`` is the run (the controller) and ``args``
depend on the event (a hook annotates ``subject`` with the view it reads,
``services.driver.views``; the registry itself reads nothing of it):

    * ``setup``: none (actors started, state restored, version 0 published);
    * ``rollout``: the ``RolloutReceipt`` just counted;
    * ``external``: an external actor's ``ExternalReceipt`` just counted (gRPC);
    * ``round``: the ``StepReceipt`` of a finished learner round;
    * ``progress``: the snapshot dict (``services.observe.report.snapshot``);
    * ``checkpoint``: the checkpoint's path and the seconds the cut took;
    * ``checkpoint_failed``: the ``CheckpointWriteError`` of a checkpoint the disk refused;
    * ``train_end``: none (the loop is done, before the final checkpoint);
    * ``shutdown``: none (before the actors are stopped).
    * ``resize``: the event dict of a live resize (``services.driver.elastic``: ``what``,
      ``from``, ``to``, ``cause``, ``seconds``, ``frames``, ``generation``).

Hooks run on the driver thread, in the order they were registered; nothing user-supplied runs
inside the learners' inner loop.

Examples:
    >>> hooks = Hooks("run")
    >>> seen = []
    >>> hooks.register("checkpoint", lambda run, path, seconds: seen.append((run, path)))
    >>> hooks.emit("checkpoint", "/tmp/ckpt", 0.5)
    >>> seen
    [('run', '/tmp/ckpt')]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

Hook = Callable[..., None]
Subject = TypeVar("Subject")
EVENTS = (
    "setup",
    "rollout",
    "external",
    "round",
    "progress",
    "checkpoint",
    "checkpoint_failed",
    "train_end",
    "shutdown",
    "resize",
)


class Hooks(Generic[Subject]):
    """The hooks registered for each of :data:`EVENTS`.

    Args:
        subject: What every hook receives first (the controller), handed over unread.
    """

    def __init__(self, subject: Subject) -> None:
        self.subject = subject
        self._hooks: dict[str, list[Hook]] = {event: [] for event in EVENTS}

    def register(self, event: str, hook: Hook) -> None:
        """Calls ``hook(subject, *args)`` whenever ``event`` is emitted.

        Raises:
            ValueError: Naming the accepted events, for an unknown ``event``.
        """
        if event not in self._hooks:
            raise ValueError(f"unknown event {event!r}; events: {EVENTS}")
        self._hooks[event].append(hook)

    def emit(self, event: str, *args: Any) -> None:
        """Calls the hooks registered for ``event``, in registration order."""
        for hook in self._hooks[event]:
            hook(self.subject, *args)
