"""Lowering a collector process's CPU priority (``collector.nice``).

Where collectors and learner ranks share a node's cores, the learner's rounds compete with
environment stepping for the CPU. In the asynchronous loop that is the common case on a small
machine: the learner is busy all the time and the collectors fill the next batch meanwhile.
With equal priorities the scheduler gives every runnable thread an equal share, so a one-thread
learner beside two busy collectors on two cores gets about two thirds of a core. Sample Factory
runs its rollout workers 10 nice levels below its learner for this reason
(``default_niceness + 10``); ``collector.nice`` does the same for relayrl's collectors: the
learner takes the CPU first and the collectors use what it leaves.

Linux keeps a nice value per thread, not per process, and a new thread inherits its creator's.
Ray starts an actor's threads (its core worker's, its concurrency groups') before the actor's
constructor runs, and the niceness Ray gives its workers (15) reaches only the threads started
after it was set: in an actor Ray restarted, the main thread was at 15 and the rest at 0. So
:func:`renice_process` sets every thread the process has to one value, the main thread's
(the process's niceness) plus the increment; threads started later inherit it.
"""

from __future__ import annotations

import os

MAX_NICE = 19  # Linux's lowest priority


def thread_ids(pid: int | str = "self") -> list[int]:
    """The thread ids of process ``pid`` (Linux ``/proc``; ``[]`` elsewhere)."""
    try:
        return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def thread_niceness(pid: int | str = "self") -> dict[int, int]:
    """Each thread's nice value in process ``pid`` (``{}`` where ``/proc`` is missing).

    Examples:
        >>> import os
        >>> thread_niceness()[os.getpid()] == os.getpriority(os.PRIO_PROCESS, os.getpid())
        True
    """
    niceness = {}
    for tid in thread_ids(pid):
        try:
            niceness[tid] = os.getpriority(os.PRIO_PROCESS, tid)
        except OSError:  # the thread ended meanwhile
            continue
    return niceness


def renice_process(increment: int) -> int:
    """Sets every thread of this process to its niceness plus ``increment`` (capped at 19).

    The process's niceness is its main thread's. Raising a nice value needs no privilege; 0
    changes nothing.

    Args:
        increment: Nice levels to add (``>= 0``).

    Returns:
        The calling thread's nice value afterwards.

    Examples:
        >>> import os
        >>> renice_process(0) == os.getpriority(os.PRIO_PROCESS, 0)
        True
    """
    if increment < 0:
        raise ValueError(
            f"increment: must be >= 0 (raising priority needs privileges), got {increment}"
        )
    if increment:
        if not thread_ids():  # no /proc: the calling thread at least
            os.nice(increment)
            return os.getpriority(os.PRIO_PROCESS, 0)
        target = min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, os.getpid()) + increment)
        done: set[int] = set()
        for _ in range(3):  # again for a thread started meanwhile by one not yet lowered
            todo = [tid for tid in thread_ids() if tid not in done]
            if not todo:
                break
            for tid in todo:
                try:
                    os.setpriority(os.PRIO_PROCESS, tid, target)
                except OSError:  # the thread ended meanwhile
                    continue
            done.update(todo)
    return os.getpriority(os.PRIO_PROCESS, 0)
