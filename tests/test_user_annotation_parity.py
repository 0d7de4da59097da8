"""``gpu_user_annotation`` events as torch 2.15's exporter writes them (issue 32, item 9).

torch 2.15's ``torch/profiler/_chrome_trace_export.py`` (release d0f2af8b): a
``gpu_user_annotation`` is not work (``_WORK_CATEGORIES`` leaves it out), so it is never moved
and its args (``External id``) are written as recorded; while annotating it is held back
(``deferred_annotations``) and written after every other activity, only where its lane
(``(device, tid)`` after the moves) has GPU work (``work_tids``). Both our writers follow it: the
annotated Chrome JSON and the ``.pftrace``.

The expectations are written out from that rule and the source JSON (which node runs on which
stream, which lane the annotations ask for), not computed by the code under test; the
``.pftrace`` is read back in the trace processor.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
from decimal import Decimal

import pytest

from support.engine_support import requires_portable
from support.join_expect import fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.join import join
from perfetto_graph_ann.pipeline.convert import convert
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.write.chrome_json import write_chrome_json

NODES = ("left_projection", "right_projection", "combine")  # two_branch: ran on streams 7, 145, 7
#: left -> lane 60, right (the only work on stream 145) -> lane 61, combine -> default lane 7
ANNOTATIONS = ({"name": "left", "stream": 60}, {"name": "right", "stream": 61}, {"name": "combine"})
WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def _annotations():
    ann = read_capture_record(fixture_capture("two_branch"))
    (g,) = ann.graphs
    by_scope = {n.annotation.get("name"): n for n in g.nodes}
    nodes = tuple(dataclasses.replace(by_scope[s], annotation=a) for s, a in zip(NODES, ANNOTATIONS))
    return dataclasses.replace(ann, graphs=(dataclasses.replace(g, nodes=nodes),))


def _source(tmp_path):
    """two_branch with a gpu_user_annotation on each stream (7 and 145) and one on a stream
    without any work (9), as CUPTI writes them (``External id``), in the middle of the file."""
    with gzip.open(fixture_trace("two_branch"), "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    first = next(i for i, e in enumerate(events) if e.get("cat") == "kernel")
    k = events[first]
    added = [{"ph": "X", "cat": "gpu_user_annotation", "name": f"step {tid}", "pid": 0, "tid": tid,
              "ts": k["ts"], "dur": 1.5, "args": {"External id": 4000 + tid}} for tid in (7, 145, 9)]
    events[first:first] = added
    src = tmp_path / "src.json"
    src.write_text(json.dumps(doc))
    return src, added


def _ns(us) -> int:
    return int(Decimal(str(us)) * 1000)


@pytest.mark.parametrize("lanes,kept", [("all", (7,)), ("none", (7, 145))])
def test_chrome_json_holds_them_back_and_keeps_their_args(tmp_path, lanes, kept):
    src, added = _source(tmp_path)
    trace = read_trace(src)
    out = tmp_path / "out.json"
    write_chrome_json(trace, out, join(trace, _annotations(), lanes))
    events = json.loads(out.read_text())["traceEvents"]
    ua = [(i, e) for i, e in enumerate(events) if e.get("cat") == "gpu_user_annotation"]
    # kept only on lanes with work after the moves (9 never had any), never moved, args as recorded
    assert [e for _, e in ua] == [a for a in added if a["tid"] in kept]
    # held back: after every other activity of the profile (kernels, runtime calls, flows)
    last_activity = max(i for i, e in enumerate(events)
                        if e.get("ph") != "M" and isinstance(e.get("pid"), int) and e.get("cat") != "gpu_user_annotation")
    assert all(i > last_activity for i, _ in ua)


def test_chrome_json_without_annotations_writes_them_in_place(tmp_path):
    src, added = _source(tmp_path)
    trace = read_trace(src)
    out = tmp_path / "out.json"
    write_chrome_json(trace, out, None)
    events = json.loads(out.read_text())["traceEvents"]
    assert [e for e in events if e.get("cat") == "gpu_user_annotation"] == added  # all three, where they were
    first = next(i for i, e in enumerate(events) if e.get("cat") == "gpu_user_annotation")
    assert events[first + 3].get("cat") == "kernel"


@requires_portable
@pytest.mark.parametrize("lanes,kept", [("all", (7,)), ("none", (7, 145))])
def test_pftrace_drops_them_on_lanes_left_without_work(tmp_path, lanes, kept):
    src, added = _source(tmp_path)
    trace = read_trace(src)
    out = tmp_path / "out.pftrace"
    stats = convert(trace, out, layout=join(trace, _annotations(), lanes))
    want = sorted((a["name"], _ns(a["ts"]), _ns(a["dur"]), f"stream {a['tid']}", a["args"]["External id"])
                  for a in added if a["tid"] in kept)
    with open_trace(out, engine="portable") as s:
        got = s.query("""
            SELECT s.name, s.ts, s.dur, t.name AS track, EXTRACT_ARG(s.arg_set_id, 'debug.External id') AS ext
            FROM slice AS s JOIN track AS t ON t.id = s.track_id
            WHERE s.category = 'gpu_user_annotation' ORDER BY s.name""").tuples()
        # the emptied stream's track is not written at all (it would hold nothing else)
        tracks = {r[0] for r in s.query("SELECT name FROM track WHERE name GLOB 'stream *'").tuples()}
    assert sorted(got) == want
    assert tracks == {f"stream {t}" for t in kept}
    assert stats.dropped_user_annotations == len(added) - len(kept)
