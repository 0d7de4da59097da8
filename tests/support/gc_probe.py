"""Test helper: how many objects the first cyclic collection after some work has to scan.

convert() and merge() run with the collector paused and drop the trace before resuming it;
had a trace survived, the first collection afterwards would walk all of its events.
"""
from __future__ import annotations

import gc
from typing import Callable, Optional


def first_collection_gen0(work: Callable[[], object], warm: Optional[Callable[[], object]] = None) -> int:
    """Run ``work`` with the collector on; the youngest generation's size when it first collects.

    ``warm`` runs before the probe is installed (imports, caches). The collector's state is
    restored afterwards.
    """
    seen = []

    def probe(phase, info):
        if phase == "start" and not seen:
            seen.append(len(gc.get_objects(generation=0)))

    was = gc.isenabled()
    gc.enable()
    gc.collect()
    try:
        if warm is not None:
            warm()
            gc.collect()
        gc.callbacks.append(probe)
        work()
        junk = [[] for _ in range(3 * gc.get_threshold()[0])]  # enough allocations to trigger a collection
        del junk
    finally:
        if probe in gc.callbacks:
            gc.callbacks.remove(probe)
        if not was:
            gc.disable()
    assert seen, "no collection ran"
    return seen[0]
