"""convert() drops the trace it read while the cyclic GC is still paused.

Everything allocated while the collector is paused stays in its youngest generation; had
the trace still been alive when convert re-enables the collector, the first allocation
after that would trigger a pass over every event (measured +0.15 s CPU on a 200k-event
trace, BENCHMARKS.md converter). The first collection after convert must find a small
youngest generation.
"""
from __future__ import annotations

from support.gc_probe import first_collection_gen0

from benchmarks.synth import write_trace
from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert


def test_first_collection_after_convert_does_not_see_the_trace(tmp_path):
    src = write_trace(tmp_path / "t.json", 6000)
    small = write_trace(tmp_path / "small.json", 50)
    # a small convert first: the modules convert imports on first use (numpy's ~10,000 objects)
    # are the process's for good, not the trace's
    seen = first_collection_gen0(lambda: convert(src, tmp_path / "t.pftrace", ConvertConfig(progress=False)),
                                 warm=lambda: convert(small, tmp_path / "small.pftrace", ConvertConfig(progress=False)))
    # the 6,000 events alone are >= 12,000 tracked objects (event + args dict); the
    # probe's own allocations are < 2,000
    assert seen < 3000, seen
