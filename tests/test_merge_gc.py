"""merge() reads, joins and writes every rank with the cyclic GC paused, as convert() does.

With the collector running, its passes over the growing heap of events cost as much as the
reading itself (measured: merging two 60k-event graph traces 1.81 -> 1.51 s CPU,
BENCHMARKS.md converter). Each rank's trace is dropped before the collector resumes, so the
first collection afterwards does not walk a dying trace.
"""
from __future__ import annotations

import gc

import perfetto_graph_ann.read.kineto as kineto
import perfetto_graph_ann.read.scan as scan
import perfetto_graph_ann.write.pftrace as pftrace
from support.gc_probe import first_collection_gen0

from benchmarks.synth import write_trace
from perfetto_graph_ann.pipeline.merge import merge


def test_each_rank_is_read_and_written_with_the_gc_paused(tmp_path, monkeypatch):
    srcs = [write_trace(tmp_path / f"r{r}.json", 3000) for r in (0, 1)]
    calls = []
    real_read, real_scan, real_write = kineto.read_trace, scan.scan_trace, pftrace.write_pftrace_stream

    def read_spy(path):  # the real reader, called through; records the collector's state
        calls.append(("read", gc.isenabled()))
        return real_read(path)

    def scan_spy(path, join=False, follow=None):  # the two-pass read's first pass (a plain file: it applies)
        calls.append(("read", gc.isenabled()))
        return real_scan(path, join, follow)

    def write_spy(*a, **k):
        calls.append(("write", gc.isenabled()))
        return real_write(*a, **k)

    monkeypatch.setattr(kineto, "read_trace", read_spy)
    monkeypatch.setattr(scan, "scan_trace", scan_spy)
    monkeypatch.setattr(pftrace, "write_pftrace_stream", write_spy)
    was = gc.isenabled()
    gc.enable()
    try:
        report = merge(srcs, tmp_path / "m.pftrace")
        assert gc.isenabled()  # restored
    finally:
        if not was:
            gc.disable()
    assert report.ranks == [0, 1]
    assert calls == [("read", False), ("write", False)] * 2


def test_first_collection_after_merge_does_not_see_a_trace(tmp_path):
    srcs = [write_trace(tmp_path / f"r{r}.json", 6000) for r in (0, 1)]
    seen = first_collection_gen0(lambda: merge(srcs, tmp_path / "m.pftrace"),
                                 warm=lambda: merge(srcs[:1], tmp_path / "warm.pftrace"))  # imports first
    # 6,000 events are >= 12,000 tracked objects (event + args dict)
    assert seen < 3000, seen
