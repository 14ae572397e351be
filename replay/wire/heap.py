"""Keeping freed memory in a process that receives large messages over and over.

A gRPC server receives every batch into fresh buffers of megabytes, which glibc's ``malloc``
takes from new ``mmap`` regions (or from an arena it has trimmed back) and returns to the
kernel when they are freed: each batch then pays page faults and the zeroing of its pages
again, as much as a copy of it. :func:`keep_freed_memory` raises glibc's mmap and trim
thresholds so those buffers are reused instead (``mallopt``, documented in ``mallopt(3)``).
The replay shards serving direct writes and the driver's gRPC server call it once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest: allocations up to it come from the heap
TRIM_THRESHOLD = 256 << 20  # free memory a heap keeps at its top before giving it back


@functools.cache
def keep_freed_memory() -> bool:
    """Lets this process's allocator keep and reuse freed large buffers (glibc; once).

    Returns:
        Whether the thresholds were set (False on a C library without ``mallopt``).
    """
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    if not ok:
        logger.debug("mallopt refused the thresholds; freed buffers go back to the kernel")
    return ok
