"""The C allocator's settings for tensor-heavy CPU compute: freed step-sized buffers are kept for the next step."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MAP_FROM = 256 << 20  # bytes: allocations this large are mapped and unmapped (a big file's arrays go back at once);
# a config-aware layer's buffers on a real-size graph (30-150 MB) stay below it: mapped, every step faulted them in anew
KEEP = 256 << 20  # bytes of freed heap kept at its top before the rest is returned to the OS


def keep_freed_buffers() -> bool:
    """With glibc, keep the tensors that a training or ranking step frees for the next step's allocations instead
    of returning them to the OS and faulting their pages in again (by default glibc maps most buffers of a few MB
    and unmaps them when freed). Peak memory is unchanged; between steps the process holds on to what it freed.
    Left as it is where the user set any MALLOC_* variable, with SOLUTION_ALLOCATOR=default, or without glibc.
    Returns whether the settings were applied."""
    if os.environ.get("SOLUTION_ALLOCATOR", "keep") == "default" or any(k.startswith("MALLOC_") for k in os.environ):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # no C library by that name, or one without mallopt (musl, macOS)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MAP_FROM)) and bool(mallopt(M_TRIM_THRESHOLD, KEEP))
