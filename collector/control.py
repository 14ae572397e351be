"""A collector's control: the pause barrier and the format of its saved state (no Ray).

Pause is a barrier: :meth:`PauseBarrier.pause` holds new rollouts and returns once none is
running; a rollout counts as running from :meth:`~PauseBarrier.enter` (after any pause) to
:meth:`~PauseBarrier.leave` (after its write was acknowledged). :func:`check_state` validates a
saved collector state against the collector loading it, upgrading older formats.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

STATE_FORMAT = 2


class PauseBarrier:
    """Counts running rollouts and holds new ones while paused.

    Examples:
        >>> barrier = PauseBarrier()
        >>> barrier.enter()
        >>> barrier.pause(timeout=0.0)  # a rollout is still running
        False
        >>> barrier.leave(); barrier.pause(timeout=0.0)
        True
        >>> barrier.resume()
    """

    def __init__(self) -> None:
        self._state = threading.Condition()
        self._active = 0
        self._paused = False

    def enter(self) -> None:
        """Starts a rollout: waits while paused, then counts it as running."""
        with self._state:
            while self._paused:
                self._state.wait()
            self._active += 1

    def leave(self) -> None:
        """Ends a rollout started by :meth:`enter`."""
        with self._state:
            self._active -= 1
            self._state.notify_all()

    def pause(self, timeout: float | None = None) -> bool:
        """Holds new rollouts; returns whether none was running within ``timeout`` seconds.

        The barrier stays paused either way, until :meth:`resume`.
        """
        with self._state:
            self._paused = True
            return self._state.wait_for(lambda: self._active == 0, timeout)

    def resume(self) -> None:
        """Lets waiting and new rollouts run again."""
        with self._state:
            self._paused = False
            self._state.notify_all()

    @contextlib.contextmanager
    def idle(self, name: str) -> Iterator[None]:
        """Holds the barrier's lock with no rollout running, so none can start meanwhile.

        Raises:
            RuntimeError: If a rollout is running (pause first); ``name`` names the collector.
        """
        with self._state:
            if self._active:
                raise RuntimeError(f"{name}: pause before loading state")
            yield


def check_state(state: Mapping[str, Any], **expected: Any) -> Mapping[str, Any]:
    """Validates a saved collector state against the collector loading it.

    Args:
        state: A collector's ``state_dict()`` (format 1 states, written before on-policy
            collectors, are n-step ones and are upgraded).
        **expected: The values this collector has for keys the state must match
            (``collector_id``, ``num_envs``, ``transitions``); ``format`` is always checked.

    Returns:
        The state in the current format.

    Raises:
        ValueError: If the state belongs to another collector or another shape of one.

    Examples:
        >>> old = {"format": 1, "n_step": 3, "collector_id": 0}
        >>> check_state(old, collector_id=0, transitions="nstep-3")["format"]
        2
        >>> check_state(old, collector_id=1)
        Traceback (most recent call last):
        ...
        ValueError: collector_id: state has 0, collector has 1
    """
    if state.get("format") == 1:  # written before on-policy collectors: n-step only
        state = {**state, "format": 2, "transitions": f"nstep-{state.get('n_step')}"}
    for key, value in {"format": STATE_FORMAT, **expected}.items():
        if state.get(key) != value:
            raise ValueError(f"{key}: state has {state.get(key)!r}, collector has {value!r}")
    return state
