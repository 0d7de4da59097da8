"""The reader's decode paths agree (typed with bulk times, typed with exact per-event times,
generic), and all agree with an independent json + Decimal read."""
from __future__ import annotations

import gzip
import json
from decimal import ROUND_HALF_UP, Decimal

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import TRACES, fixture_trace
from perfetto_graph_ann.read import events as rev
from perfetto_graph_ann.read import kineto
from perfetto_graph_ann.read.model import TraceEvent


def _raw(name):
    return gzip.decompress(fixture_trace(name).read_bytes())


@pytest.mark.parametrize("name", TRACES)
def test_fast_and_generic_paths_agree(name):
    raw = _raw(name)
    fast = kineto.parse_trace_bytes(raw).events
    events_raw = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])["traceEvents"]
    generic = rev._from_generic(events_raw, None)
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
    """The typed path with every time converted per event (Decimal times) on the same events."""
    return rev._from_typed(raw_events, None, bulk=False)


def _bulk(raw_events: bytes):
    """The typed path's events when its bulk pass converts every time, else None (the typed
    decode refused the events, or a time sent them to the per-event conversion)."""
    exact_times, calls = rev._exact_times, []
    rev._exact_times = lambda *a: calls.append(a) or exact_times(*a)
    try:
        got = rev._from_typed(raw_events, None)
    except kineto.TraceFormatError:
        got = None
    finally:
        rev._exact_times = exact_times
    return None if calls else got


def _events_raw(doc_bytes: bytes) -> bytes:
    return msgspec.json.decode(doc_bytes, type=dict[str, msgspec.Raw])["traceEvents"]


@pytest.mark.parametrize("name", TRACES)
def test_bulk_times_equal_the_exact_path(name):
    """The bulk ts/dur conversion (the fast path) gives the events the Decimal path gives."""
    raw = _events_raw(_raw(name))
    bulk = _bulk(raw)
    assert bulk is not None  # the fixtures are in Kineto's format: the bulk pass must take them
    assert bulk == _exact(raw)


def test_bulk_times_on_a_large_synthetic_trace():
    from benchmarks.synth import dumps, make_trace

    raw = _events_raw(dumps(make_trace(6000, overlap_ns=700)))
    bulk = _bulk(raw)
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
    bulk = _bulk(raw)
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


def test_complete_event_without_dur_is_named_on_the_bulk_path():
    raw = b'{"traceEvents": [{"ph": "i", "name": "a", "pid": 1, "tid": 1, "ts": 0.500}, ' \
          b'{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 1.000}]}'
    with pytest.raises(kineto.TraceFormatError, match="^t.json: event 1 \\('k'\\): complete event \\(ph X\\) without dur"):
        kineto.parse_trace_bytes(raw, "t.json")
    with pytest.raises(kineto.TraceFormatError, match="event 1 \\('k'\\): complete event \\(ph X\\) without ts"):
        kineto.parse_trace_bytes(raw.replace(b'"ts": 1.000', b'"dur": 1.000'), "t.json")


_BAD_TIMES = [
    ('"ts": -5.0, "dur": 1.000', "event 1: negative timestamp -5.0 us"),
    ('"ts": 1.000, "dur": -1.5', "event 1 ('k'): negative duration -1.5 us"),
    ('"ts": 1e300, "dur": 1', "event 1: ts 1E+300 us is out of range"),
    ('"ts": 9000000000000000, "dur": 1e15', "event 1 ('k'): ts + dur is out of range"),
    ('"ts": 1.000', "event 1 ('k'): complete event (ph X) without dur"),
    ('"dur": 1.000', "event 1 ('k'): complete event (ph X) without ts"),
    ('', "event 1 ('k'): complete event (ph X) without ts"),
    ('"ts": null, "dur": 2', "event 1 ('k'): complete event (ph X) without ts"),
    ('"ts": "NaN", "dur": 2', "event 1: ts is not a finite number (Decimal('NaN'))"),
]


@pytest.mark.parametrize("times, problem", _BAD_TIMES)
@pytest.mark.parametrize("unknown_key", [False, True])
def test_time_problems_are_worded_alike_on_both_paths(times, problem, unknown_key):
    """One time check: the same message whether the typed path reads the events or (an
    unknown key in the file) the generic path does; a string time is a number only typed."""
    extra = ', "tts": 3' if unknown_key else ""
    sep = ", " if times else ""
    doc = ('{"traceEvents": [{"ph": "i", "name": "a", "pid": 1, "tid": 1, "ts": 0.500}, '
           '{"ph": "X", "name": "k", "pid": 1, "tid": 1' + sep + times + extra + '}]}').encode()
    if unknown_key and '"NaN"' in times:
        problem = "event 1 ('k'): ts is a string, expected a number"
    with pytest.raises(kineto.TraceFormatError) as ei:
        kineto.parse_trace_bytes(doc, "t.json")
    assert str(ei.value) == f"t.json: {problem}"


def test_times_in_other_forms_read_alike_on_both_paths():
    """Ints, more decimals, exponents: the typed path's per-event conversion gives the generic
    path's events (round half up, as Perfetto's JSON importer)."""
    body = ('[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": 1.0005}, '
            '{"ph": "i", "name": "b", "pid": 1, "tid": 1, "ts": 1.5e3}, '
            '{"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 0.0004, "dur": 2.25}]').encode()
    typed = rev._from_typed(body, None)
    assert typed == rev._from_generic(body, None)
    assert [(e.ts_ns, e.dur_ns) for e in typed] == [(5000, 1001), (1500000, None), (0, 2250)]



_time_chars = st.text(alphabet="0123456789.-+e\"{}[]nul ,", max_size=22).map(lambda s: s.encode())


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(kineto_times.map(str.encode), other_times.map(str.encode), _time_chars,
                          st.builds(lambda i, f: f"{i}.{f}".encode(), st.integers(0, 10**17), st.integers(0, 10**5))),
                min_size=1, max_size=6))
def test_bulk_time_check_is_the_regex(raws):
    """The bytes-pass check of the bulk path accepts exactly what the reference regex accepts;
    a value with a comma inside (a JSON string, array or object, never a number) is always refused."""
    text = b",".join(raws)
    if any(b"," in r for r in raws):
        assert not rev._kineto_times(text, len(raws))
    else:
        assert rev._kineto_times(text, len(raws)) == (rev._KINETO_TIMES.fullmatch(text) is not None)


@pytest.mark.parametrize("raws, ok", [
    ([b"1.000"], True), ([b"0.500", b"123456789012345.999"], True), ([b"1234567890123456.000"], False),
    ([b".000"], False), ([b"1.00"], False), ([b"1.0000"], False), ([b"1.000", b".000"], False),
    ([b"1..000"], False), ([b"1.000", b""], False), ([b"1.000", b"2"], False), ([b"-1.000"], False),
    ([b"1.000e3"], False), ([b"1.000", b"2.000."], False), ([b"1.000,2.000"], False), ([b'"1.000"'], False),
    ([b"12.345", b"67.890", b"11.111"], True), ([b"12.345", b"67.890", b"1.111"], True),
    ([b"12.345", b"67.89", b"11.111"], False), ([b"12.345", b"67.8900", b"11.111"], False),
])
def test_bulk_time_check_cases(raws, ok):
    assert rev._kineto_times(b",".join(raws), len(raws)) is ok


def test_fast_decoders_accept_the_same_json_keys():
    """The bulk path decodes into TraceEvent's own slots under Kineto's key names; it must know
    exactly the keys the exact path's Struct knows (so no field name such as ``index`` or
    ``extra`` becomes an accepted JSON key)."""
    assert set(rev._KinetoEvent.__struct_encode_fields__) == {"ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s"}


@pytest.mark.parametrize("key, value", [("index", 5), ("extra", {"a": 1}), ("ts_ns", 7), ("dur_ns", 7),
                                        ("__class__", "x"), ("bp ", "e")])
def test_model_field_names_are_unknown_keys(key, value):
    """A JSON key named like a TraceEvent field is an unknown key, as before: the typed path
    declines, the generic path keeps it in ``extra`` and the model fields keep their meaning."""
    ev = {"ph": "X", "name": "k", "pid": 1, "tid": 2, "ts": 1.5, "dur": 0.25, key: value}
    doc = json.dumps({"traceEvents": [{"ph": "i", "name": "a", "pid": 1, "tid": 2, "ts": 1.0}, ev]}).encode()
    assert rev._from_typed(_events_raw(doc), None) is None
    e = kineto.parse_trace_bytes(doc).events[1]
    assert type(e) is TraceEvent
    assert (e.index, e.ts_ns, e.dur_ns, e.extra) == (1, 1500, 250, {key: value})


def test_bulk_events_are_plain_trace_events_with_every_field_in_place():
    """The bulk path's objects are TraceEvents (not the decode class) whose every field equals
    an independent read of the JSON, including ``s`` / ``bp`` in ``extra`` and absent args."""
    raw = (b'[{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12.345, "dur": 0.001, '
           b'"args": {"stream": 7, "correlation": 9}}, '
           b'{"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 12.345, "cat": "ac2g", "name": "ac2g", "bp": "e"}, '
           b'{"ph": "i", "s": "t", "name": "mark", "pid": "Spans", "tid": "x", "ts": 3.000}, '
           b'{"ph": "i", "s": "g", "bp": "e", "name": "both", "pid": 1, "tid": 1, "ts": 4.000, "id": "a"}, '
           b'{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "p"}}]')
    evs = json.loads(raw, parse_float=Decimal)
    bulk = _bulk(raw)
    assert bulk is not None and bulk == _exact(raw)
    for i, (e, d) in enumerate(zip(bulk, evs, strict=True)):
        assert type(e) is TraceEvent
        extra = {k: d[k] for k in ("bp", "s") if k in d} or None
        ts = int(d["ts"] * 1000) if "ts" in d else None
        dur = int(d["dur"] * 1000) if "dur" in d else None
        want = TraceEvent(i, d["ph"], d.get("cat", ""), d.get("name", ""), d.get("pid", ""), d.get("tid", ""),
                          ts, dur, d.get("args", {}), d.get("id"), extra)
        assert e == want
        assert [getattr(e, f) for f in TraceEvent.__struct_fields__] == [getattr(want, f) for f in TraceEvent.__struct_fields__]


def test_null_args_take_the_generic_path_and_read_as_absent_args():
    doc = b'{"traceEvents": [{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 1.000, "dur": 2.000, "args": null}]}'
    assert rev._from_typed(_events_raw(doc), None) is None  # torch never writes null args
    assert kineto.parse_trace_bytes(doc).events == [TraceEvent(0, "X", "", "k", 1, 1, 1000, 2000, {})]


def test_trace_event_replace():
    e = TraceEvent(3, "X", "kernel", "k", 0, 7, 10, 5, {"stream": 7})
    r = e.replace(index=4, args={"stream": 8})
    assert (r.index, r.args, r.ts_ns, r.dur_ns, r.name) == (4, {"stream": 8}, 10, 5, "k")
    assert (e.index, e.args) == (3, {"stream": 7}) and type(r) is TraceEvent
    with pytest.raises(TypeError):
        e.replace(bogus=1)


def _outcome(data: bytes):
    """What parse_trace_bytes makes of ``data``: the events and metadata (in key order), or the error."""
    try:
        t = kineto.parse_trace_bytes(data, "t.json")
    except kineto.TraceFormatError as e:
        return ("error", str(e))
    return ("ok", t.events, list(t.metadata.items()))


def _reference_outcome(data: bytes):
    """The same without _split_top: the whole document scanned as {key: Raw} first."""
    split_top = kineto._split_top
    kineto._split_top = lambda data: None
    try:
        return _outcome(data)
    finally:
        kineto._split_top = split_top


@pytest.mark.parametrize("name", TRACES)
def test_split_top_takes_kineto_files_and_reads_them_as_the_full_scan(name):
    raw = _raw(name)
    split = kineto._split_top(raw)
    assert split is not None  # Kineto's layout: the array found without scanning it
    top, events = split
    full = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    assert bytes(events) == bytes(full.pop("traceEvents"))
    assert [(k, bytes(v)) for k, v in top.items()] == [(k, bytes(v)) for k, v in full.items()]
    assert _outcome(raw) == _reference_outcome(raw)


_EV = b'{"ph": "X", "cat": "kernel", "name": "k]", "pid": 0, "tid": 7, "ts": 1.000, "dur": 0.500}'
_TOP_CASES = {
    "plain": b'{"a": 1, "traceEvents": [' + _EV + b'], "traceName": "x"}',
    "spaces": b' {"traceEvents" \n:\t[ ' + _EV + b' ] \n}\n',
    "empty array": b'{"traceEvents": [], "b": [1]}',
    "empty array, spaces": b'{"traceEvents": [ ], "b": {}}',
    "name with ] and backslash": b'{"traceEvents": [' + _EV + b'], "traceName": "C:\\\\run[1]\\\\t.json"}',
    "list after": b'{"traceEvents": [' + _EV + b'], "foo": [1, 2]}',
    "list of objects after": b'{"traceEvents": [' + _EV + b'], "foo": [{"a": [1]}]}',
    "object with list after": b'{"traceEvents": [' + _EV + b'], "foo": {"a": [1], "b": 2}}',
    "nested key before": b'{"x": {"traceEvents": [1]}, "traceEvents": [' + _EV + b']}',
    "nested key only": b'{"x": {"traceEvents": [' + _EV + b']}}',
    "key as a value": b'{"x": "traceEvents", "traceEvents": [' + _EV + b']}',
    "key in a string": b'{"x": "\\"traceEvents\\": [", "traceEvents": [' + _EV + b']}',
    "escaped key": b'{"trace\\u0045vents": [' + _EV + b']}',
    "escaped duplicate after": b'{"traceEvents": [' + _EV + b'], "trace\\u0045vents": null}',
    "duplicate after": b'{"traceEvents": [' + _EV + b'], "traceEvents": [' + _EV + b', ' + _EV + b']}',
    "duplicate null after": b'{"traceEvents": [' + _EV + b'], "traceEvents": null}',
    "duplicate before": b'{"traceEvents": [], "traceEvents": [' + _EV + b']}',
    "not an array": b'{"traceEvents": {"a": [' + _EV + b']}}',
    "top level array": b'["traceEvents", [' + _EV + b']]',
    "trailing garbage": b'{"traceEvents": [' + _EV + b']} ]',
    "broken event": b'{"traceEvents": [{"ph": "X",, "ts": 1.000}], "t": "]"}',
    "broken tail": b'{"traceEvents": [' + _EV + b'], "t": }',
    "unclosed": b'{"traceEvents": [' + _EV + b']',
    "inner ] last": b'{"traceEvents": [' + _EV + b', {"ph": "i", "args": {"a": [1]}, "ts": 2.000}]}',
    "unknown key": b'{"traceEvents": [{"ph": "i", "ts": 1.000, "tts": 3}], "t": 1}',
    "other times": b'{"traceEvents": [{"ph": "i", "ts": 1.5}], "t": 1}',
    "deep metadata": b'{"traceEvents": [' + _EV + b'], "deep": ' + b"[" * 5000 + b"]" * 5000 + b"}",
}


@pytest.mark.parametrize("case", sorted(_TOP_CASES))
def test_split_top_gives_the_full_scans_result_on_odd_layouts(case):
    """Wherever the key or the array's end is not what it seems, the result (events, metadata
    and its key order, or the error message) is the full scan's."""
    data = _TOP_CASES[case]
    assert _outcome(data) == _reference_outcome(data)


_top_values = st.recursive(
    st.one_of(st.none(), st.integers(-5, 5), st.sampled_from(["]", "[", "traceEvents", '"traceEvents": [', "\\", "}"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "traceEvents"]), inner, max_size=2)),
    max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "traceEvents", "trace\\u0045vents", "traceName", "b"]),
                          st.one_of(st.just(None), _top_values)), max_size=4),
       st.integers(0, 4), st.sampled_from(["", " ", "\n"]))
def test_split_top_random_top_levels(members, where, space):
    """Random top levels around a real events array (keys repeated, escaped, lists and "]" after
    it, the key's name inside values): always the full scan's result."""
    parts = [f'"{k}":{space}{json.dumps(v)}'.encode() for k, v in members]
    parts.insert(where % (len(parts) + 1), b'"traceEvents":' + space.encode() + b"[" + _EV + b"]")
    data = b"{" + b", ".join(parts) + b"}"
    assert _outcome(data) == _reference_outcome(data)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), kineto_times, st.builds(lambda f: f"0.{f:03d}", st.integers(0, 999))), max_size=12))
def test_bulk_ns_is_decimal_times_1000(times):
    """The bulk conversion (leading zeros of values below 1 us dropped, one JSON int array)
    gives Decimal(text) * 1000 for every value, None where absent."""
    raws = [None if t is None else msgspec.Raw(t.encode()) for t in times]
    assert rev._bulk_ns(raws) == [None if t is None else int(Decimal(t) * 1000) for t in times]
