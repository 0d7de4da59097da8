"""Timing helper shared by the GPU probes (tests/gpu/probe_*.py)."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def per_call_us(fn: Callable[[], object], n: int = 200, rounds: int = 5) -> float:
    """Median over ``rounds`` of the mean time of ``n`` back-to-back calls, in microseconds."""
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter() - t0) / n)
    return round(statistics.median(ts) * 1e6, 3)
