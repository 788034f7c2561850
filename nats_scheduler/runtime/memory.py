"""Give the memory a start-up freed back to the operating system.

Loading 100,000 Schedules and warming up the Run summaries decodes hundreds of thousands of
short-lived objects; once they are freed, glibc's allocator keeps most of the pages they
used, so the process's resident size stays that of its busiest moment (docs/benchmarks.md,
"A restart at 100,000 Schedules"). ``malloc_trim`` hands the free pages back: one call after
the warm-up, a few milliseconds. Where the C library is not glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)


def release_freed_memory() -> bool:
    """Ask the C allocator to return its free pages; False when it cannot (not glibc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    try:
        trim(0)
    except OSError:  # pragma: no cover - a C library that refuses the call
        log.debug("malloc_trim failed", exc_info=True)
        return False
    return True
