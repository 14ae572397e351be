"""The embedded local Ray's processes, kept out of the driver's process group.

A signal sent to a whole process group (Ctrl-C in a terminal, ``kill -TERM -<pgid>``, some
process supervisors) reaches every process in it. Ray starts its node processes (GCS, raylet,
log monitor) as children of the driver, in the driver's group, so the same SIGTERM that asks
the driver for a clean stop also kills the cluster under it: the final checkpoint can no longer
be cut, and ``ray.shutdown`` then waits 60 s for a GCS that is gone.

:func:`own_process_group` starts those processes in a session of their own while
``ray.init`` runs, so a group signal reaches the driver alone; the driver then stops at the
next boundary, cuts its final checkpoint and shuts the cluster down itself. This is only done
where the kernel ties the children's lives to the driver's (Linux ``PR_SET_PDEATHSIG``, which
Ray sets up), so a driver that dies still takes its cluster with it; Ray does the same on
Windows (``CREATE_NEW_PROCESS_GROUP``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator


@contextlib.contextmanager
def own_process_group() -> Iterator[bool]:
    """While active, Ray's node processes start in their own session (see the module docstring).

    Yields:
        Whether the processes are detached (False where the kernel offers no fate-sharing).
    """
    from ray._private import services, utils

    if not utils.detect_fate_sharing_support() or not hasattr(services, "ConsolePopen"):
        yield False
        return
    original = services.ConsolePopen.__init__

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        kwargs.setdefault("start_new_session", True)
        original(self, *args, **kwargs)

    services.ConsolePopen.__init__ = init
    try:
        yield True
    finally:
        services.ConsolePopen.__init__ = original
