"""Timing helper shared by the GPU probes (tests/gpu/probe_*.py)."""
from __future__ import annotations

import statistics
import time
from typing import Callable

from perfetto_graph_ann.capture import backends as _backends
from perfetto_graph_ann.capture import session as _session


def per_call_us(fn: Callable[[], object], n: int = 200, rounds: int = 5) -> float:
    """Median over ``rounds`` of the mean time of ``n`` back-to-back calls, in microseconds."""
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter() - t0) / n)
    return round(statistics.median(ts) * 1e6, 3)


class NoopScope:
    """Stands in for ``mark_kernels``: a with-block that does nothing (the Python floor)."""

    def __init__(self, ann, *, backward=True):  # mark_kernels's signature
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return None


class CountOnlyScope(NoopScope):
    """Stands in for ``mark_kernels``: only the node count each edge makes, nothing recorded."""

    def __enter__(self):
        _backends.active().node_count(_session.current().graph)
        return self

    def __exit__(self, *a):
        _backends.active().node_count(_session.current().graph)
