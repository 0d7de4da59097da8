"""A conversion worker's heap: what it frees stays mapped for what it allocates next.

A conversion allocates and frees many buffers of 0.1-10 MB (the followed JSON's 1 MB reads,
the writer's output chunks, the plan's columns). glibc's malloc serves such sizes with
``mmap`` and unmaps them on ``free`` (its threshold rises only after a large block is freed),
and gives the top of its heap back to the system once 128 kB or more of it is free, so every
new buffer is faulted in page by page again. The conversion worker converts one profile and
leaves, so nothing it frees has to go back: :func:`keep_freed_memory` asks glibc to serve
allocations below 32 MiB (its largest mmap threshold on 64-bit) from the heap and never to
trim it. Its peak stays what the conversion holds at once; it is not returned before the exit.
Measured in BENCHMARKS.md ("the conversion worker's heap").
"""
from __future__ import annotations

import ctypes
from typing import Optional

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

#: mallopt's parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: allocations below this come from the heap (glibc's maximum on 64-bit: 4 MiB * sizeof(long))
MMAP_THRESHOLD = 32 << 20
#: free memory at the heap's top before glibc gives it back (the largest int: never, in practice)
TRIM_THRESHOLD = (1 << 31) - 1


def keep_freed_memory(libc: Optional[ctypes.CDLL] = None) -> bool:
    """Set glibc's malloc to keep what the process frees (see the module's docstring); False
    where the C library is not glibc (nothing changed) or refuses either setting (the first
    may have been taken)."""
    if libc is None:
        try:
            libc = ctypes.CDLL(None)  # the interpreter's own symbols, its C library's among them
        except OSError:
            return False
    if getattr(libc, "gnu_get_libc_version", None) is None or getattr(libc, "mallopt", None) is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
