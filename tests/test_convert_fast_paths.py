"""The writer's and FastEncoder's fast paths against the perfetto.protos reference, byte for byte.

Covers what the fixtures may not hit: a kernel-heavy graph-replay trace (one-slot templates,
the reused correlation slot, the inlined END packets, slices the loop passes straight
through) and time deltas / durations at the inlined varint edges (128, 16384).
"""
from __future__ import annotations

import io

import pytest

from benchmarks.synth import make_trace, dumps
from perfetto_graph_ann.read.kineto import parse_trace_bytes
from perfetto_graph_ann.read.model import KinetoTrace, TraceEvent
from perfetto_graph_ann.write.perfetto import WriterConfig, write_perfetto

#: every test on the compiled packet hot path and the pure-Python one (conftest.writer_path)
pytestmark = pytest.mark.usefixtures("writer_path")


def _both(trace: KinetoTrace, **kw) -> tuple:
    out = []
    for enc in ("fast", "protos"):
        buf = io.BytesIO()
        write_perfetto(trace, buf, None, WriterConfig(encoder=enc, progress=False, **kw))
        out.append(buf.getvalue())
    return tuple(out)


@pytest.mark.parametrize("list_args", ["typed", "text"])
def test_graph_replays_fast_equals_protos(list_args):
    trace = parse_trace_bytes(dumps(make_trace(5000, fixtures=("seed_block_annotated",))))
    fast, ref = _both(trace, list_args=list_args)
    assert fast == ref and len(fast) > 100_000


def test_durations_and_gaps_at_the_varint_edges():
    edges = [0, 1, 127, 128, 129, 16383, 16384, 16385, (1 << 21) - 1, 1 << 21, 1 << 35]
    events, ts, i = [], 1_000, 0
    for dur in edges:
        for gap in edges:
            for pid, tid in ((0, 7), (5, 5)):  # a GPU stream and a CPU thread
                events.append(TraceEvent(i, "X", "kernel" if pid == 0 else "cpu_op", f"k{i % 3}", pid, tid, ts, dur,
                                         {"device": 0, "stream": 7, "correlation": i // 2} if pid == 0 else {"External id": i}))
                i += 1
            ts += dur + gap
    trace = KinetoTrace(path=None, events=events, metadata={"baseTimeNanoseconds": 10**18})
    fast, ref = _both(trace, own_sequence_min=10**9)  # everything on the shared sequence
    assert fast == ref
    fast, ref = _both(trace)  # both tracks on sequences of their own
    assert fast == ref
