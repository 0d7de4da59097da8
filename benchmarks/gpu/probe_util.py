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


class CuptiSwitch:
    """CUPTI initialised (one subscribe + unsubscribe, what the node watch's warm-up does) or
    detached (``cuptiFinalize`` at a driver API exit call site, what ``NodeWatch.detach`` does),
    on demand: for probes that compare a process's work in both states. CUDA must be initialised."""

    def __init__(self) -> None:
        from perfetto_graph_ann.capture import fastpath, nodewatch

        backend = _backends.active()
        self.fast, self.nodewatch = fastpath.module(), nodewatch
        self.watch_fns = backend.node_watch_functions()
        self.detach_fns = backend.cupti_detach_functions()
        if self.fast is None or self.watch_fns is None or self.detach_fns is None:
            raise SystemExit("needs the compiled capture path and the cupti backend")

    def init(self) -> int:
        """CUPTI's result of the subscription (0: initialised)."""
        nw = self.nodewatch
        rc = self.fast.watch_subscribe(self.watch_fns[0], self.watch_fns[1], nw.RESOURCE_DOMAIN, nw.GRAPHNODE_CREATED)
        self.fast.watch_unsubscribe(self.watch_fns[2])
        return rc

    def detach(self) -> int:
        """``cuptiFinalize``'s result (0: detached), or why it did not run."""
        return self.fast.watch_detach(*self.detach_fns, self.nodewatch.DRIVER_API_DOMAIN)


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
