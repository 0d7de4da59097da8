"""Bad input: one TraceFormatError naming the file and the problem; CLI exit 2; no output."""
from __future__ import annotations

import gzip
import json

import pytest

from conftest import fixture_trace
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.errors import TraceFormatError
from perfetto_graph_ann.read.kineto import read_trace

GOOD = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2.25, "args": {"stream": 7}}

CASES = {
    "not_json": (b"this is not json", "not valid JSON"),
    "empty": (b"", "empty"),
    "array_top": (b"[1, 2]", "top level"),
    "no_trace_events": (json.dumps({"schemaVersion": 1}).encode(), "no traceEvents"),
    "trace_events_not_list": (json.dumps({"traceEvents": {"a": 1}}).encode(), "not an array"),
    "event_not_object": (json.dumps({"traceEvents": [GOOD, 5]}).encode(), "event 1 is a number"),
    "name_wrong_type": (json.dumps({"traceEvents": [dict(GOOD, name=3)]}).encode(), "name is a number"),
    "ts_string": (json.dumps({"traceEvents": [dict(GOOD, ts="abc")]}).encode(), "ts"),
    "negative_dur": (json.dumps({"traceEvents": [dict(GOOD, dur=-1.0)]}).encode(), "negative duration"),
    "nan": (b'{"traceEvents": [{"ph": "X", "name": "k", "pid": 0, "tid": 0, "ts": NaN, "dur": 1}]}', "not valid JSON"),
    "infinity": (b'{"traceEvents": [{"ph": "X", "name": "k", "pid": 0, "tid": 0, "ts": 1, "dur": Infinity}]}', "not valid JSON"),
    "x_without_dur": (json.dumps({"traceEvents": [{k: v for k, v in GOOD.items() if k != "dur"}]}).encode(), "without dur"),
    "args_not_object": (json.dumps({"traceEvents": [dict(GOOD, args=[1])]}).encode(), "args is a array"),
    "huge_ts": (b'{"traceEvents": [{"ph": "X", "name": "k", "pid": 0, "tid": 0, "ts": 1e300, "dur": 1}]}', "out of range"),
    "negative_ts": (json.dumps({"traceEvents": [dict(GOOD, ts=-5.0)]}).encode(), "negative timestamp -5.0 us"),
    "end_overflow": (json.dumps({"traceEvents": [dict(GOOD, ts=9e15, dur=1e15)]}).encode(), "ts + dur is out of range"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_names_file_and_problem(case, tmp_path):
    data, problem = CASES[case]
    p = tmp_path / f"{case}.json"
    p.write_bytes(data)
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    msg = str(ei.value)
    assert msg.startswith(str(p)) and problem in msg, msg


@pytest.mark.parametrize("case", ["not_json", "negative_dur", "nan", "no_trace_events"])
def test_cli_exit_2_and_no_output(case, tmp_path, capsys):
    data, problem = CASES[case]
    p = tmp_path / "in.json"
    p.write_bytes(data)
    out = tmp_path / "out.pftrace"
    assert main(["convert", str(p), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(p) in err and problem in err
    assert not out.exists()
    assert [f.name for f in tmp_path.iterdir()] == ["in.json"]  # no temp files either


def test_cli_keeps_previous_output_on_error(tmp_path):
    p = tmp_path / "in.json"
    p.write_bytes(b"{")
    out = tmp_path / "out.pftrace"
    out.write_bytes(b"previous")
    assert main(["convert", str(p), "-o", str(out)]) == 2
    assert out.read_bytes() == b"previous"


def test_truncated_gzip(tmp_path):
    data = fixture_trace("two_branch").read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="gzip data is truncated or corrupt") as ei:
        read_trace(p)
    assert str(ei.value).startswith(str(p))


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        read_trace(tmp_path / "nope.json")


def test_plain_json_and_gzip_read_the_same(tmp_path):
    raw = gzip.decompress(fixture_trace("two_branch").read_bytes())
    p = tmp_path / "t.json"
    p.write_bytes(raw)
    a, b = read_trace(p), read_trace(fixture_trace("two_branch"))
    assert [(e.ph, e.name, e.ts_ns, e.dur_ns, e.args) for e in a.events] == \
           [(e.ph, e.name, e.ts_ns, e.dur_ns, e.args) for e in b.events]


def test_exact_ns():
    """Kineto's microsecond decimals become exact integer ns (Decimal, never float)."""
    from perfetto_graph_ann.read.kineto import parse_trace_bytes

    ts = "5141607025806.203"
    t = parse_trace_bytes(('{"traceEvents": [{"ph": "X", "name": "k", "pid": 0, "tid": 0, "ts": %s, "dur": 0.001}]}' % ts).encode())
    assert t.events[0].ts_ns == 5141607025806203 and t.events[0].dur_ns == 1


def test_unknown_keys_and_phases_kept(tmp_path):
    """Unknown top-level event keys go to extra (generic path); unknown phases still become events."""
    from perfetto_graph_ann.read.kineto import parse_trace_bytes
    from perfetto_graph_ann.pipeline.convert import convert
    from support.pftrace_decode import decode

    doc = {"traceEvents": [dict(GOOD, weird={"a": [1, 2]}), {"ph": "Q", "name": "odd", "cat": "new_cat", "pid": 1,
                                                               "tid": 1, "ts": 3.0, "dur": 1.0},
                           {"ph": "n", "name": "async", "pid": 1, "tid": 1, "ts": 4.0, "cat": "x"}]}
    t = parse_trace_bytes(json.dumps(doc).encode())
    assert t.events[0].extra == {"weird": {"a": [1, 2]}}
    out = tmp_path / "o.pftrace"
    convert(t, out)
    d = decode(out)
    assert {(s.name, s.cat, s.ts, s.dur) for s in d.slices} == {("k", "kernel", 1500, 2250), ("odd", "new_cat", 3000, 1000)}
    assert [(s.name, s.args["ph"]) for s in d.instants] == [("async", "n")]


def test_counters(tmp_path):
    from perfetto_graph_ann.read.kineto import parse_trace_bytes
    from perfetto_graph_ann.pipeline.convert import convert
    from support.pftrace_decode import decode

    doc = {"traceEvents": [{"ph": "C", "name": "mem", "pid": 5, "tid": 5, "ts": 1.0, "args": {"alloc": 10, "free": 2.5}},
                           {"ph": "C", "name": "mem", "pid": 5, "tid": 5, "ts": 2.0, "args": {"alloc": 12, "free": 3.5}}]}
    out = tmp_path / "c.pftrace"
    convert(parse_trace_bytes(json.dumps(doc).encode()), out)
    d = decode(out)
    vals = sorted((d.tracks[t].name, ts, v) for t, ts, v in d.counters)
    assert vals == [("mem alloc", 1000, 10), ("mem alloc", 2000, 12), ("mem free", 1000, 2.5), ("mem free", 2000, 3.5)]


def _kineto_like(n: int = 400) -> bytes:
    """A trace written over several lines per event, as Kineto writes it."""
    return json.dumps({"schemaVersion": 1, "traceEvents": [dict(GOOD, name=f"k{i}", ts=1.5 + i) for i in range(n)]},
                      indent=1).encode()


@pytest.mark.parametrize("gz", [False, True])
def test_cut_off_trace_names_the_byte_where_it_ends_and_what_is_missing(tmp_path, gz, capsys):
    data = _kineto_like()
    cut = data[: len(data) // 2]
    p = tmp_path / ("cut.json.gz" if gz else "cut.json")
    p.write_bytes(gzip.compress(cut) if gz else cut)
    out = tmp_path / "out.pftrace"
    assert main(["convert", str(p), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    of = " of the decompressed JSON" if gz else ""
    lines = cut.count(b"\n") + 1
    assert f"{p}: not valid JSON (cut off: the text ends at byte {len(cut):,}{of}, line {lines:,}, " \
           "before the JSON document is complete; expected the rest of it" in err, err
    assert [f.name for f in tmp_path.iterdir()] == [p.name]  # no output, no temporary file


def test_broken_line_in_the_middle_names_byte_line_column_and_expectation(tmp_path, capsys):
    data = _kineto_like()
    lines = data.split(b"\n")
    k = len(lines) // 2
    while b'"dur"' not in lines[k]:
        k += 1
    lines[k] = lines[k].replace(b'"dur":', b'"dur"')  # the colon after a key missing
    bad = b"\n".join(lines)
    at = sum(len(ln) + 1 for ln in lines[:k]) + lines[k].index(b'"dur"') + len(b'"dur"') + 1
    p = tmp_path / "broken.json"
    p.write_bytes(bad)
    out = tmp_path / "out.pftrace"
    assert main(["convert", str(p), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    col = at - (sum(len(ln) + 1 for ln in lines[:k])) + 1
    assert f"{p}: not valid JSON (byte {at:,}, line {k + 1:,}, column {col}: expected ':', found '2'" in err, err
    assert [f.name for f in tmp_path.iterdir()] == [p.name]
