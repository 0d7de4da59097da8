"""The reader's two decode paths agree, and both agree with an independent json + Decimal read."""
from __future__ import annotations

import gzip
import json
from decimal import ROUND_HALF_UP, Decimal

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _exact(raw_events: bytes):
    """The exact per-event path (Decimal times) on the same events."""
    return kineto._from_fast(kineto._fast_decoder.decode(raw_events), None)


def _events_raw(doc_bytes: bytes) -> bytes:
    return msgspec.json.decode(doc_bytes, type=dict[str, msgspec.Raw])["traceEvents"]


@pytest.mark.parametrize("name", TRACES)
def test_bulk_times_equal_the_exact_path(name):
    """The bulk ts/dur conversion (the fast path) gives the events the Decimal path gives."""
    raw = _events_raw(_raw(name))
    bulk = kineto._from_bulk(raw, None)
    assert bulk is not None  # the fixtures are in Kineto's format: the fast path must take them
    assert bulk == _exact(raw)


def test_bulk_times_on_a_large_synthetic_trace():
    from benchmarks.synth import dumps, make_trace

    raw = _events_raw(dumps(make_trace(6000, overlap_ns=700)))
    bulk = kineto._from_bulk(raw, None)
    assert bulk is not None and len(bulk) >= 6000
    assert bulk == _exact(raw)


kineto_times = st.builds(lambda i, f: f"{i}.{f:03d}", st.integers(0, 10**15 - 1), st.integers(0, 999))
other_times = st.one_of(
    st.integers(0, 10**18).map(str),  # no decimals
    st.builds(lambda i, f, n: f"{i}.{f:0{n}d}", st.integers(0, 10**12), st.integers(0, 99), st.sampled_from([1, 2])),
    st.builds(lambda i, f: f"{i}.{f:06d}", st.integers(0, 10**12), st.integers(0, 999999)),  # sub-ns digits
    st.builds(lambda i: f"{i}e3", st.integers(0, 10**6)),
    st.just(f"{10**15}.000"), st.just("null"),  # 16 integer digits: beyond the bulk bound
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.one_of(kineto_times, st.none()), st.one_of(kineto_times, st.none()),
                          st.sampled_from(["X", "i", "s"])), min_size=1, max_size=8),
       st.one_of(st.none(), other_times), st.integers(0, 7))
def test_bulk_path_exact_or_declines(items, odd, where):
    """Random times: the read gives round-half-up(Decimal(text) * 1000); a time not in Kineto's
    format (or a complete event without ts/dur) makes the bulk path decline, never guess."""
    evs = []
    for i, (ts, dur, ph) in enumerate(items):
        if ph == "X":
            ts, dur = ts or "1.000", dur or "0.500"
        evs.append((ph, ts, dur))
    if odd is not None:
        ph, ts, dur = evs[where % len(evs)]
        evs[where % len(evs)] = (ph, odd, dur)
    body = ",".join("{" + ", ".join([f'"ph": "{ph}"', '"name": "n"', '"pid": 1', '"tid": 1']
                                    + ([f'"ts": {ts}'] if ts is not None else [])
                                    + ([f'"dur": {dur}'] if dur is not None else [])) + "}"
                    for ph, ts, dur in evs)
    raw = f"[{body}]".encode()
    bulk = kineto._from_bulk(raw, None)
    if odd is not None:
        assert bulk is None
    else:
        assert bulk is not None and bulk == _exact(raw)
    try:
        got = kineto.parse_trace_bytes(b'{"traceEvents": ' + raw + b"}").events
    except kineto.TraceFormatError:
        assert odd is not None  # only the odd time can make a valid-looking file fail
        return
    for e, (ph, ts, dur) in zip(got, evs, strict=True):
        for text, ns in ((ts, e.ts_ns), (dur, e.dur_ns)):
            if text is None or text == "null":
                assert ns is None
            else:
                assert ns == int((Decimal(text) * 1000).to_integral_value(rounding=ROUND_HALF_UP))


def test_bulk_path_declines_complete_event_without_dur_and_the_exact_path_names_it():
    raw = b'{"traceEvents": [{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 1.000}]}'
    assert kineto._from_bulk(_events_raw(raw), None) is None
    with pytest.raises(kineto.TraceFormatError, match="complete event \\(ph X\\) without dur"):
        kineto.parse_trace_bytes(raw, "t.json")



_time_chars = st.text(alphabet="0123456789.-+e\"{}[]nul ", max_size=22).map(lambda s: s.encode())


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(kineto_times.map(str.encode), other_times.map(str.encode), _time_chars,
                          st.builds(lambda i, f: f"{i}.{f}".encode(), st.integers(0, 10**17), st.integers(0, 10**5))),
                min_size=1, max_size=6))
def test_bulk_time_check_is_the_regex(raws):
    """The bytes-pass check of the bulk path accepts exactly what the reference regex accepts;
    a value with a space inside (a JSON string or object, never a number) is always refused."""
    text = b" ".join(raws)
    if any(b" " in r for r in raws):
        assert not kineto._kineto_times(text, len(raws))
    else:
        assert kineto._kineto_times(text, len(raws)) == (kineto._KINETO_TIMES.fullmatch(text) is not None)


@pytest.mark.parametrize("raws, ok", [
    ([b"1.000"], True), ([b"0.500", b"123456789012345.999"], True), ([b"1234567890123456.000"], False),
    ([b".000"], False), ([b"1.00"], False), ([b"1.0000"], False), ([b"1.000", b".000"], False),
    ([b"1..000"], False), ([b"1.000", b""], False), ([b"1.000", b"2"], False), ([b"-1.000"], False),
    ([b"1.000e3"], False), ([b"1.000", b"2.000."], False), ([b"1.000 2.000"], False), ([b'"1.000"'], False),
])
def test_bulk_time_check_cases(raws, ok):
    assert kineto._kineto_times(b" ".join(raws), len(raws)) is ok
