"""Fuzzing the converter and the join with mutated real traces (issue 8, item 1).

Every case is one of the H200 recordings with up to six JSON-level mutations and one byte-level
mutation (see ``hostile_inputs``). Allowed outcomes only: a trace that perfetto.protos decodes
(and, for a sample, that the trace processor loads with one slice per written slice and no
import errors), or a GraphAnnError naming the file, with the previous outputs untouched and no
temporary file left. The default run has a fast derandomized subset; ``-m fuzz_long`` runs
10,000 cases (``PGA_FUZZ_LONG`` per test) and prints the outcome counts.
"""
from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import hostile_inputs as H

OUTCOMES: collections.Counter = collections.Counter()


def _report(name: str, counts: collections.Counter, seconds: float) -> None:
    line = {"test": name, "cases": sum(counts.values()), "outcomes": dict(sorted(counts.items())), "seconds": round(seconds, 1)}
    print(json.dumps(line))
    target = os.environ.get("PGA_FUZZ_REPORT")
    if target:
        with open(target, "a") as f:  # test-run log, not a package output
            f.write(json.dumps(line) + "\n")


def _run(n: int, label: str) -> collections.Counter:
    counts: collections.Counter = collections.Counter()

    @settings(max_examples=n, database=None)
    @given(H.hostile_trace())
    def case(c):
        outcome, _, _ = H.check_trace_case(folder, c.name, c.data())
        counts[outcome] += 1

    t0 = time.monotonic()
    with H.scratch() as folder:
        case()
    _report(label, counts, time.monotonic() - t0)
    return counts


def test_fuzz_convert_fast():
    counts = _run(H.FAST_CASES * 2, "convert_fast")
    # the generator must reach both outcomes, or it tests nothing
    assert counts["ok"] > 0 and sum(v for k, v in counts.items() if k.startswith("error")) > 0


def test_a_trace_that_matches_its_annotations_no_more_is_refused_naming_them(tmp_path):
    """Found by the long run (issue 32, item 5): a mutated trace whose kernels were all
    renamed reads fine, but its capture record matches none of its replays. The join cannot
    know which file is wrong: its error names the annotation file first and the trace after
    it (docs/design.md, "Refusals"); an allowed outcome, with no output written."""
    import gzip

    doc = json.loads(gzip.decompress((H.FIXTURES / "seed_block_annotated.trace.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = "renamed"
    outcome, out, _ = H.check_trace_case(tmp_path, "seed_block_annotated", json.dumps(doc).encode())
    assert (outcome, out) == ("error:join", None)


@pytest.mark.fuzz_long
@pytest.mark.timeout(3000)
def test_fuzz_convert_long():
    counts = _run(int(os.environ.get("PGA_FUZZ_LONG_CONVERT", "10000")), "convert_long")
    assert counts["ok"] > 0


def _tp_sample(n: int, tmp_path: Path) -> int:
    """Load ``n`` successfully converted mutated traces in the trace processor."""
    from support.engine_support import portable_reason

    reason = portable_reason()
    if reason:
        pytest.skip(reason)
    from perfetto_graph_ann.query.session import open_trace

    loaded = []

    @settings(max_examples=n * 25, database=None)
    @given(H.hostile_trace())
    def collect(c):
        if len(loaded) >= n:
            return
        folder = tmp_path / f"c{len(loaded)}"
        folder.mkdir(exist_ok=True)
        outcome, out, stats = H.check_trace_case(folder, c.name, c.data())
        if outcome == "ok" and c.mutated:  # mutated, yet converted
            loaded.append((out, stats, c))

    collect()
    assert loaded, "no mutated trace converted: the generator is broken"
    for out, stats, muts in loaded:
        with open_trace(out, engine="portable") as s:
            n_slices = s.query("SELECT COUNT(*) FROM slice").tuples()[0][0]
            errors = s.query("SELECT name, value FROM stats WHERE severity IN ('error', 'data_loss') AND value > 0").tuples()
        assert n_slices == stats.slices + stats.instants + stats.projected, (muts, n_slices, stats)
        assert errors == [], (muts, errors)
    return len(loaded)


def test_fuzzed_traces_load_in_trace_processor(tmp_path):
    assert _tp_sample(3, tmp_path) == 3


@pytest.mark.fuzz_long
@pytest.mark.timeout(3000)
def test_fuzzed_traces_load_in_trace_processor_long(tmp_path):
    t0 = time.monotonic()
    n = _tp_sample(int(os.environ.get("PGA_FUZZ_LONG_TP", "40")), tmp_path)
    _report("trace_processor_long", collections.Counter({"loaded_ok": n}), time.monotonic() - t0)


# ---- targeted hostile traces: each must be our error or a valid trace ------------------

def _doc(events, **top):
    d = {"schemaVersion": 1, "traceEvents": events}
    d.update(top)
    return d


K = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2, "args": {"stream": 7, "device": 0}}


@pytest.mark.parametrize("doc,problem", [
    (_doc([dict(K, ts=-5)]), "negative timestamp"),
    (_doc([dict(K, ts=H.Raw(b"9223372036854775.808"))]), "out of range"),
    (_doc([dict(K, dur=H.Raw(b"1e400"))]), "out of range"),
    (_doc([dict(K, ts=H.Raw(b"NaN"))]), "not valid JSON"),
    (_doc([dict(K, name=H.Raw(b'"\xff\xfe"'))]), "JSON"),
    (_doc([dict(K, args=H.deep(100_000))]), "nested too deeply"),
    (_doc(H.deep(100_000)), "nested too deeply"),
    (H.Raw(b"\xef\xbb\xbf{\"traceEvents\": []}"), "not valid JSON"),
])
def test_named_hostile_inputs(doc, problem, tmp_path):
    from perfetto_graph_ann.errors import TraceFormatError
    from perfetto_graph_ann.read.kineto import read_trace

    p = tmp_path / "bad.json"
    p.write_bytes(H.encode(doc))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    H.assert_typed_error(ei.value, p)
    assert problem in str(ei.value)


@pytest.mark.parametrize("events", [
    [dict(K, ts=30), dict(K, ts=10), dict(K, ts=20)],                       # out of order
    [K, K, K],                                                              # exact duplicates
    [dict(K, ph="Q"), dict(K, ph="é", dur=None), dict(K, ph="")],           # unknown phases
    [dict(K, ts=H.Raw(b"9223372036854775.000"), dur=0)],                     # last representable us
    [dict(K, name="x" * 2_000_000)],                                         # huge string
    [dict(K, args={"a": H.deep(200, kind="dict")})],                         # deep args the reader accepts
    [{"ph": "s", "id": 1, "pid": 0, "tid": 1, "ts": 1, "cat": "ac2g", "name": "f"},
     {"ph": "s", "id": 1, "pid": 0, "tid": 1, "ts": 1, "cat": "ac2g", "name": "f"},
     {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 10, "cat": "ac2g", "name": "f", "bp": "e"}, K],  # duplicate flow ids
])
def test_odd_but_valid_traces_convert(events, tmp_path):
    folder = tmp_path
    outcome, out, stats = H.check_trace_case(folder, "none", H.encode(_doc(events)))
    assert outcome == "ok", outcome
    assert stats.events == len(events)


@given(st.integers(min_value=0, max_value=(1 << 63) - 1), st.integers(min_value=0, max_value=10**6))
@settings(max_examples=40, database=None)
def test_any_int64_timestamp_is_exact_or_typed(ts_ns, dur_ns):
    """ts in [0, 2^63) ns, written as Kineto's 3-decimal microseconds, converts exactly."""
    with H.scratch("pga-fuzz-") as folder:
        ts = H.Raw(f"{ts_ns // 1000}.{ts_ns % 1000:03d}".encode())
        dur = H.Raw(f"{dur_ns // 1000}.{dur_ns % 1000:03d}".encode())
        data = H.encode(_doc([dict(K, ts=ts, dur=dur)]))
        outcome, out, _ = H.check_trace_case(folder, "none", data)
        if outcome != "ok":
            return
        t = H.decode_pftrace(out.read_bytes())
        # the clock snapshot anchors the first event's time: BOOTTIME == ts_ns
        snaps = [c.timestamp for p in t.packet if p.HasField("clock_snapshot") for c in p.clock_snapshot.clocks if c.clock_id == 6]
        assert snaps == [ts_ns]
