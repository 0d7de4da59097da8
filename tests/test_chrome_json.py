"""Annotated Chrome JSON: lanes as tids, join args, lane names, flows that follow, exact times."""
from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from support.engine_support import requires_portable
from support.join_expect import TRACES, calibrated_expectation, fixture_capture, fixture_trace, load_json
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.errors import OutputError
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.write.chrome_json import write_chrome_json


def _load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


@pytest.mark.parametrize("name", TRACES)
def test_without_layout_round_trips(tmp_path, name):
    out = tmp_path / "out.json.gz"
    write_chrome_json(read_trace(fixture_trace(name)), out, None)
    assert _load(out) == load_json(name)


def test_exact_times_written_as_in_source(tmp_path):
    out = tmp_path / "out.json"
    write_chrome_json(read_trace(fixture_trace("two_branch")), out, None)
    raw_out = out.read_text()
    with gzip.open(fixture_trace("two_branch"), "rt") as f:
        raw_src = f.read()
    # Every ts literal of the source appears verbatim (no float noise such as ...8170001).
    import re
    src_ts = re.findall(r'"ts": ?([0-9.]+)', raw_src)
    out_ts = re.findall(r'"ts": ?([0-9.]+)', raw_out)
    assert Counter(src_ts) == Counter(out_ts)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_seed_block_lanes_and_args(tmp_path, suffix):
    name = "seed_block_annotated"
    trace = read_trace(fixture_trace(name))
    layout = join(trace, read_capture_record(fixture_capture(name)), "all")
    out = tmp_path / f"annotated{suffix}"
    write_chrome_json(trace, out, layout)
    doc = _load(out)
    src = load_json(name)
    expect = calibrated_expectation(name)
    events = doc["traceEvents"]
    # the source's envelope plus torch 2.15's flag, written before traceEvents
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {
        **{k: v for k, v in src.items() if k != "traceEvents"}, "cudaGraphInlineAnnotated": True}
    assert list(doc).index("cudaGraphInlineAnnotated") == list(doc).index("traceEvents") - 1
    # placed events keep their file position; metadata for new lanes comes after
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert Counter(e["tid"] for e in kernels) == {7: 10, 61: 20, 62: 40}
    for idx, exp in expect.items():
        e = events[idx]
        assert e["name"] == src["traceEvents"][idx]["name"] and e["ts"] == src["traceEvents"][idx]["ts"]
        assert e["tid"] == e["args"]["stream"] == exp["lane"]
        if exp["stream"] != exp["lane"]:  # torch 2.15: original_stream only on events that moved
            assert e["args"]["original_stream"] == exp["stream"]
        else:
            assert "original_stream" not in e["args"]
        assert e["args"]["name"] == exp["scope"] and e["args"]["graph node id"] == exp["key"]
        assert e["args"]["replay"] == exp["replay"] and e["args"]["join"] == "calibrated"
        assert e["args"]["correlation"] == src["traceEvents"][idx]["args"]["correlation"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    # new lanes named as torch 2.15 names them (descriptive names are the .pftrace's)
    assert names[(0, 61)] == "stream 61 " and names[(0, 62)] == "stream 62 "
    assert names[(0, 7)] == "stream 7 "  # Kineto's own name for the recorded stream stays
    sort = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in events if e.get("ph") == "M" and e["name"] == "thread_sort_index"}
    assert sort[(0, 61)] == 61 and sort[(0, 62)] == 62
    # every GPU flow end still lands on a kernel at the same place
    slices = {(e["pid"], e["tid"], e["ts"]) for e in kernels}
    gpu_flow_ends = [e for e in events if e.get("ph") == "f" and e["pid"] == 0]
    assert len(gpu_flow_ends) == 70
    assert all((e["pid"], e["tid"], e["ts"]) in slices for e in gpu_flow_ends)


def test_graph_lanes_none_keeps_tids(tmp_path):
    name = "two_branch"
    trace = read_trace(fixture_trace(name))
    layout = join(trace, read_capture_record(fixture_capture(name)), "none")
    out = tmp_path / "none.json"
    write_chrome_json(trace, out, layout)
    events = _load(out)["traceEvents"]
    src = load_json(name)["traceEvents"]
    for idx, exp in calibrated_expectation(name).items():
        assert events[idx]["tid"] == src[idx]["tid"] == events[idx]["args"]["stream"]
        if exp["lane"] != 7:  # torch 2.15: only where the annotation names a stream
            assert events[idx]["args"]["annotated_stream"] == exp["lane"]
        else:
            assert "annotated_stream" not in events[idx]["args"]
        assert "original_stream" not in events[idx]["args"]
    assert len(events) == len(src)  # no lane metadata added in "none"


def test_missing_output_folder(tmp_path):
    trace = read_trace(fixture_trace("two_branch"))
    with pytest.raises(OutputError) as info:
        write_chrome_json(trace, tmp_path / "nope" / "x.json", None)
    assert str(info.value).startswith(str(tmp_path / "nope" / "x.json"))


@requires_portable
def test_annotated_json_in_trace_processor(tmp_path):
    """Perfetto's own JSON importer (what HTA-style consumers of the JSON see) shows the lanes."""
    from perfetto_graph_ann.query.session import open_trace

    name = "seed_block_annotated"
    trace = read_trace(fixture_trace(name))
    out = tmp_path / "annotated.json.gz"
    write_chrome_json(trace, out, join(trace, read_capture_record(fixture_capture(name)), "all"))
    expect = calibrated_expectation(name)
    want = Counter(x["lane"] for x in expect.values())
    scopes = Counter((x["lane"], x["scope"]) for x in expect.values())
    with open_trace(out, engine="portable") as s:
        rows = s.query("""
            SELECT th.name, EXTRACT_ARG(s.arg_set_id, 'args.stream') AS lane,
                   EXTRACT_ARG(s.arg_set_id, 'args.name') AS scope, COUNT(*)
            FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread th USING (utid)
            WHERE s.category = 'kernel' GROUP BY 1, 2, 3""").tuples()
    assert Counter({(lane, scope): n for _, lane, scope, n in rows}) == scopes
    names = {lane: th for th, lane, _, _ in rows}
    assert names == {7: "stream 7 ", 61: "stream 61 ", 62: "stream 62 "}
    assert sum(n for *_, n in rows) == sum(want.values())
