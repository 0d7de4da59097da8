"""Event kinds the fixtures lack: memcpy / memset and their launches, old category spellings,
GPU user annotations enclosing kernels, python functions, overhead; hand-written input."""
from __future__ import annotations

import json

from support.pftrace_decode import decode
from perfetto_graph_ann.read.kineto import parse_trace_bytes
from perfetto_graph_ann.pipeline.convert import convert

EVENTS = [
    {"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "python3"}},
    {"ph": "M", "name": "thread_name", "pid": 9, "tid": 140000000000001, "args": {"name": "main thread"}},
    {"ph": "X", "cat": "python_function", "name": "train.py(10): step", "pid": 9, "tid": 140000000000001,
     "ts": 100.0, "dur": 50.0, "args": {"Python id": 1}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 9, "tid": 140000000000001,
     "ts": 101.0, "dur": 2.0, "args": {"correlation": 40, "cbid": 41}},
    {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 40, "pid": 9, "tid": 140000000000001, "ts": 101.0},
    {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
     "ts": 104.0, "dur": 3.5, "args": {"device": 0, "stream": 7, "correlation": 40, "bytes": 4096}},
    {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 40, "pid": 0, "tid": 7, "ts": 104.0, "bp": "e"},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemsetAsync", "pid": 9, "tid": 140000000000001,
     "ts": 110.0, "dur": 1.0, "args": {"correlation": 41}},
    {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 41, "pid": 9, "tid": 140000000000001, "ts": 110.0},
    {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7,
     "ts": 112.0, "dur": 0.5, "args": {"device": 0, "stream": 7, "correlation": 41}},
    {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 41, "pid": 0, "tid": 7, "ts": 112.0, "bp": "e"},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "my_region", "pid": 0, "tid": 7,
     "ts": 120.0, "dur": 10.0, "args": {"External id": 5}},
    {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 120.0, "dur": 4.0,
     "args": {"device": 0, "stream": 7, "correlation": 50}},
    {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 124.0, "dur": 6.0,
     "args": {"device": 0, "stream": 7, "correlation": 51}},
    {"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0, "ts": 100.0, "dur": 5.0},
]


def test_every_kind(tmp_path):
    out = tmp_path / "k.pftrace"
    stats = convert(parse_trace_bytes(json.dumps({"traceEvents": EVENTS}).encode()), out)
    d = decode(out)
    by_name = {s.name: s for s in d.slices}
    assert set(by_name) == {e["name"] for e in EVENTS if e["ph"] == "X"}
    # memcpy (old spelling) and memset on the GPU lane, with their launches linked
    for gpu, launch in (("Memcpy HtoD (Pageable -> Device)", "cudaMemcpyAsync"), ("Memset (Device)", "cudaMemsetAsync")):
        lane = d.tracks[by_name[gpu].track]
        assert lane.name == "stream 7" and d.tracks[lane.parent_uuid].name == "GPU 0"
        (src, dst), = [(s, t) for s, t in d.flows() if t.name == gpu]
        assert src.name == launch
    assert stats.flows == 2
    # the GPU user annotation shares the lane and encloses its kernels
    ann = by_name["my_region"]
    assert ann.track == by_name["k1"].track == by_name["k2"].track
    assert (ann.ts, ann.dur) == (120000, 10000) and stats.spill_tracks == 0
    # a 64-bit tid becomes a named track in its process (Perfetto tids are 32-bit); pid -1 a named root
    t = d.tracks[by_name["train.py(10): step"].track]
    assert t.name == "main thread" and d.tracks[t.parent_uuid].process.pid == 9
    o = d.tracks[by_name["Activity Buffer Request"].track]
    assert d.tracks[o.parent_uuid].name == "-1"
    assert by_name["Memcpy HtoD (Pageable -> Device)"].args["bytes"] == 4096
