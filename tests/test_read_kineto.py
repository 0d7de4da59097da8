"""The reader's two decode paths agree, and both agree with an independent json + Decimal read."""
from __future__ import annotations

import gzip
import json
from decimal import Decimal

import msgspec
import pytest

from conftest import TRACES, fixture_trace
from perfetto_graph_ann.read import kineto


def _raw(name):
    return gzip.decompress(fixture_trace(name).read_bytes())


@pytest.mark.parametrize("name", TRACES)
def test_fast_and_generic_paths_agree(name):
    raw = _raw(name)
    fast = kineto.parse_trace_bytes(raw).events
    events_raw = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])["traceEvents"]
    generic = kineto._from_generic(events_raw, None)
    assert len(fast) == len(generic)
    for a, b in zip(fast, generic):
        assert (a.index, a.ph, a.cat, a.name, a.pid, a.tid, a.ts_ns, a.dur_ns, a.id, a.extra) == \
               (b.index, b.ph, b.cat, b.name, b.pid, b.tid, b.ts_ns, b.dur_ns, b.id, b.extra)
        assert a.args == b.args and [type(v) for v in a.args.values()] == [type(v) for v in b.args.values()]


@pytest.mark.parametrize("name", TRACES)
def test_matches_independent_read(name):
    doc = json.loads(_raw(name), parse_float=Decimal)
    trace = kineto.read_trace(fixture_trace(name))
    assert trace.metadata == {k: v for k, v in json.loads(_raw(name)).items() if k != "traceEvents"}
    assert trace.base_time_ns == doc["baseTimeNanoseconds"]
    for e, d in zip(trace.events, doc["traceEvents"], strict=True):
        assert e.ph == d["ph"] and e.name == d.get("name", "")
        if "ts" in d:
            assert e.ts_ns == int(Decimal(d["ts"]) * 1000)
        if "dur" in d:
            assert e.dur_ns == int(Decimal(d["dur"]) * 1000)


def test_generic_path_used_for_unknown_keys():
    t = kineto.parse_trace_bytes(b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, '
                                 b'"ts": 1.0005, "dur": 2, "tts": 7, "args": {"f": 0.5}}]}')
    e = t.events[0]
    assert e.extra == {"tts": 7} and e.ts_ns == 1001 and e.dur_ns == 2000  # 1000.5 ns: half up, as the JSON importer
    assert type(e.args["f"]) is float
