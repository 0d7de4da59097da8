"""The cyclic garbage collector paused while the package builds many small objects at once."""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

__all__ = ["paused_gc"]

#: paused_gc's state across threads: (pauses in progress, whether the collector was on at the first)
_pauses_lock = threading.Lock()
_pauses = [0, False]


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while converting (or loading a sidecar).

    Reading and writing allocate millions of small acyclic objects (events, tuples, bytes);
    with the collector on, its full passes over that growing heap cost as much as the
    conversion itself (BENCHMARKS.md, "converter"). Reference counting still frees
    everything; the collector is restored afterwards. Conversions in several threads at once
    (nested ones too) share one pause: the first saves the collector's setting, the last puts
    it back (each on its own would see the others' pause and could leave it off).
    """
    with _pauses_lock:
        if _pauses[0] == 0:
            _pauses[1] = gc.isenabled()
            gc.disable()
        _pauses[0] += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses[0] -= 1
            if _pauses[0] == 0 and _pauses[1]:
                gc.enable()
