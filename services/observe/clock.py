"""When this process started (wall clock), for start-up and time-to-solve figures."""

from __future__ import annotations

import os
import time

_IMPORTED_AT = time.time()


def process_start_time() -> float:
    """Unix time at which this process started.

    Read from ``/proc`` on Linux (boot time plus the process's start in clock ticks); elsewhere
    the time this module was first imported, which is later by the imports before it.
    """
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of stat(5), counted after the command name
        with open("/proc/stat") as info:
            boot = next(int(line.split()[1]) for line in info if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED_AT
