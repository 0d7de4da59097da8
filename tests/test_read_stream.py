"""``read_trace`` reads a file a block at a time (issue 33): the events, their indexes and the
metadata are exactly what the whole-file read gives (``parse_trace_bytes`` of the file's
bytes), for any block size, layout and compression; every file it is unsure of, and every
error, goes to the whole-file read, so the messages are that read's."""
from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import TRACES, fixture_trace
from perfetto_graph_ann import formats
from perfetto_graph_ann.errors import TraceFormatError
from perfetto_graph_ann.read import kineto

from test_read_kineto import _TOP_CASES


def _whole(path):
    """The whole-file read, as read_trace did before it streamed: events and metadata, or the error."""
    try:
        t = kineto.parse_trace_bytes(formats.read_bytes(path, TraceFormatError), str(path))
    except TraceFormatError as e:
        return ("error", str(e))
    return ("ok", t.events, list(t.metadata.items()))


def _read(path, block=None, monkeypatch=None):
    if block is not None:
        monkeypatch.setattr(kineto, "STREAM_BLOCK", block)
    try:
        t = kineto.read_trace(path)
    except TraceFormatError as e:
        return ("error", str(e))
    return ("ok", t.events, list(t.metadata.items()))


def _kineto_multiline(events, head=None, tail=None) -> bytes:
    """Kineto's own layout: the envelope first, each event over several lines (``  {``, a line
    per field, ``  },``), the array last but for a short ``traceName``."""
    head = head if head is not None else {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}]}
    lines = ["{"] + [f'  "{k}": {json.dumps(v)},' for k, v in head.items()] + ['  "traceEvents": [']
    for i, e in enumerate(events):
        body = ",\n".join(f'    "{k}": {json.dumps(v)}' for k, v in e.items())
        lines.append("  {\n" + body + "\n  }" + ("," if i < len(events) - 1 else ""))
    lines.append("  ]" + ("," if tail else ""))
    if tail:
        lines.append(",\n".join(f'  "{k}": {json.dumps(v)}' for k, v in tail.items()))
    lines.append("}")
    return "\n".join(lines).encode()


def _events(n: int):
    out = []
    for i in range(n):
        e = {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 2, "ts": 1000.5 + i,
             "dur": 0.25, "args": {"External id": i, "Input Dims": [[i, 2], []]}}
        if i % 5 == 0:  # nested objects and the separator's text inside args and strings
            e["args"]["nested"] = {"a": {"b": [1, {"c": "}, {"}]}, "d": "x"}
            e["name"] = 'weird }, { name'
        if i % 11 == 0:
            out.append({"ph": "f", "id": i, "pid": 0, "tid": 7, "ts": 1000.5 + i, "cat": "ac2g", "name": "ac2g",
                        "bp": "e"})
        out.append(e)
    return out


@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("block", [64, 1000, 1 << 20])
def test_fixtures_read_as_the_whole_file(name, block, monkeypatch):
    assert _read(fixture_trace(name), block, monkeypatch) == _whole(fixture_trace(name))


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("block", [7, 100, 4096])
def test_kineto_layout_and_nested_separators_over_many_blocks(tmp_path, gz, block, monkeypatch):
    data = _kineto_multiline(_events(300), tail={"traceName": "t.json"})
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    expected = _whole(p)
    calls = []
    decode = kineto.decode_events
    monkeypatch.setattr(kineto, "decode_events", lambda *a: calls.append(a[2] if len(a) > 2 else None) or decode(*a))
    got = _read(p, block, monkeypatch)
    assert got[0] == "ok" and got == expected
    assert [e.index for e in got[1]] == list(range(len(got[1])))
    if block <= 4096:
        assert len(calls) > 3  # it did read in runs (each starting at the index it continues)
        assert calls == sorted(calls) and calls[0] == 0


@pytest.mark.parametrize("case", sorted(_TOP_CASES))
def test_odd_top_levels_read_as_the_whole_file(case, tmp_path, monkeypatch):
    p = tmp_path / "t.json"
    p.write_bytes(_TOP_CASES[case])
    assert _read(p, 5, monkeypatch) == _whole(p)


@pytest.mark.parametrize("where", ["early", "late"])
def test_a_bad_event_gives_the_whole_file_reads_error(tmp_path, where, monkeypatch):
    """A run the decoder refuses is never taken: the file is read whole and its error is the one
    today's read gives (the event's index counts from the start of the file)."""
    evs = _events(200)
    evs[10 if where == "early" else 190]["dur"] = -1.0
    p = tmp_path / "bad.json"
    p.write_bytes(_kineto_multiline(evs))
    got = _read(p, 512, monkeypatch)
    assert got == _whole(p) and got[0] == "error" and "negative duration" in got[1]


def test_cut_and_broken_files_give_the_whole_file_reads_error(tmp_path, monkeypatch):
    data = _kineto_multiline(_events(200))
    for name, text in (("cut.json", data[: len(data) // 2]), ("broken.json", data.replace(b'"dur"', b'"dur', 1)),
                       ("cut.json.gz", gzip.compress(data)[:-100])):
        p = tmp_path / name
        p.write_bytes(text)
        got = _read(p, 256, monkeypatch)
        assert got == _whole(p) and got[0] == "error", name


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.integers(1, 3000), st.sampled_from(["", " ", "\n  "]))
def test_random_sizes_and_blocks(n, block, space):
    import tempfile
    from pathlib import Path

    evs = _events(n)
    data = (b'{"a": 1, "traceEvents": [' + ("," + space).encode().join(json.dumps(e).encode() for e in evs) +
            b"], \"traceName\": \"x\"}")
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "t.json"
        p.write_bytes(data)
        saved = kineto.STREAM_BLOCK
        kineto.STREAM_BLOCK = block
        try:
            got = _read(p)
        finally:
            kineto.STREAM_BLOCK = saved
        assert got == _whole(p)


def test_a_comma_before_the_arrays_end_is_refused_as_the_whole_file_read_refuses_it(tmp_path, monkeypatch):
    evs = _events(50)
    data = b'{"traceEvents": [' + b", ".join(json.dumps(e).encode() for e in evs) + b", ]}"
    p = tmp_path / "t.json"
    p.write_bytes(data)
    got = _read(p, 64, monkeypatch)
    assert got == _whole(p) and got[0] == "error"


def test_a_bad_event_ends_the_streaming_read_at_once(tmp_path, monkeypatch):
    """A run the decoder refuses for a bad event is not decoded again block after block: the
    whole-file read takes over after the tries of one block."""
    evs = _events(400)
    evs[3]["dur"] = -1.0
    p = tmp_path / "bad.json"
    p.write_bytes(_kineto_multiline(evs))
    expected = _whole(p)
    refused = []
    decode = kineto.decode_events

    def counting(*a):
        try:
            return decode(*a)
        except TraceFormatError:
            refused.append(a[2] if len(a) > 2 else None)
            raise
    monkeypatch.setattr(kineto, "decode_events", counting)
    assert _read(p, 256, monkeypatch) == expected
    # a few tries (a block whose only end is refused waits for the next), not one per block of
    # the ~300 after the bad event
    assert len([r for r in refused if r is not None]) <= 6
