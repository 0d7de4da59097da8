"""Our annotated Chrome JSON against torch 2.15's own exporter, event by event.

The references (``tests/data/torch215/``, see its README) are what torch 2.15.0's
``export_chrome_trace(path, cuda_graph_annotations=..., graph_lanes=...)`` wrote for the
packaged fixtures. Our output reaches them three ways (``join`` + ``write_chrome_json``,
``pga.export`` on a profiler, the CLI's ``convert -o x.json``) and must match: every event
of the profile (name, ts, dur, tid, every arg and the args' order), the GPU lanes' names,
the envelope's keys; ``replay``, ``join`` and ``join_ambiguous`` are the only args we add.

The synthetic cases below cover what the fixtures do not exercise (typed values, process
group lane names, moves onto real streams, ``gpu_user_annotation`` events); their expected
values are written out from torch 2.15's documented behaviour, not computed by our code.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from support.join_expect import fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.model import AnnotationSet
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.write.chrome_json import write_chrome_json
from perfetto_graph_ann.capture.export import export

REFERENCES = Path(__file__).parent / "data" / "torch215"
CASES = [(name, lanes) for name in ("two_branch", "seed_block_annotated") for lanes in ("all", "none")]
#: args we add on top of torch's (README, "Compared with torch 2.15")
OUR_ARGS = {"replay", "join", "join_ambiguous"}
#: events torch's exporter rebuilds from Kineto's activities rather than copying them
REBUILT_PIDS = {"Spans", "Traces", ""}


def _load(path):
    with (gzip.open if str(path).endswith(".gz") else open)(path, "rt") as f:
        return json.load(f)


def _profile_events(doc):
    """The profile's own events: not metadata, flows, or the envelope events torch rebuilds."""
    return [e for e in doc["traceEvents"] if e.get("ph") not in ("M", "s", "f") and e.get("pid") not in REBUILT_PIDS]


def _key(e):
    return e["ph"], e.get("cat"), e["name"], e["pid"], e["ts"]


def _thread_names(doc):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "thread_name"}


class _Profiler:
    """What export() uses of torch.profiler.profile."""

    def __init__(self, name):
        self.name = name

    def export_chrome_trace(self, path):
        with gzip.open(fixture_trace(self.name), "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)


def _ours(how, name, lanes, out):
    cap = fixture_capture(name)
    if how == "join":
        trace = read_trace(fixture_trace(name))
        write_chrome_json(trace, out, join(trace, read_capture_record(cap), lanes))
    elif how == "export":
        export(_Profiler(name), out, annotations=str(cap), graph_lanes=lanes)
    elif how == "exact":  # a newer Kineto's trace: graph node ids in the events, the exact join
        doc = _load(fixture_trace(name))
        ref = _load(REFERENCES / f"{name}.torch.{lanes}.trace.json.gz")
        ids = {(e["name"], e["ts"]): {k: e["args"][k] for k in ("graph id", "graph node id")}
               for e in ref["traceEvents"] if e.get("cat") == "kernel" and "graph node id" in e.get("args", {})}
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel":
                e["args"].update(ids[(e["name"], e["ts"])])
        src = out.parent / "with_ids.json"
        src.write_text(json.dumps(doc))
        trace = read_trace(src)
        layout = join(trace, read_capture_record(cap), lanes)
        assert layout.report.matched["exact"] == layout.report.graphed > 0
        write_chrome_json(trace, out, layout)
    else:
        argv = ["convert", str(fixture_trace(name)), "-o", str(out), "-a", str(cap), "-q"]
        assert main(argv + (["--graph-lanes", lanes] if lanes == "all" else [])) == 0  # none: the .json default
    return _load(out)


@pytest.mark.parametrize("how", ["join", "export", "cli", "exact"])
@pytest.mark.parametrize("name,lanes", CASES)
def test_matches_torch_215_event_by_event(tmp_path, name, lanes, how):
    ref = _load(REFERENCES / f"{name}.torch.{lanes}.trace.json.gz")
    ours = _ours(how, name, lanes, tmp_path / "ours.json")

    theirs = _profile_events(ref)
    by_key = defaultdict(list)
    for e in _profile_events(ours):
        by_key[_key(e)].append(e)
    assert sum(map(len, by_key.values())) == len(theirs)
    moved = 0
    for t in theirs:
        candidates = by_key.get(_key(t))
        assert candidates, f"torch's event missing from ours: {t}"
        o = candidates.pop(0)
        assert (o["tid"], o.get("dur")) == (t["tid"], t.get("dur")), t["name"]
        o_args = o.get("args", {})
        extra = [k for k in o_args if k not in t.get("args", {})]
        assert set(extra) <= OUR_ARGS, extra
        assert [(k, v) for k, v in o_args.items() if k not in OUR_ARGS] == list(t.get("args", {}).items())
        moved += "original_stream" in t.get("args", {})
    assert (moved > 0) == (lanes == "all")  # the comparison covers moved events

    # GPU lanes: every lane with GPU work is named as torch names it (new lanes "stream N ")
    gpu_lanes = {(e["pid"], e["tid"]) for e in theirs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    ref_names, our_names = _thread_names(ref), _thread_names(ours)
    assert {k: our_names.get(k) for k in gpu_lanes} == {k: ref_names[k] for k in gpu_lanes}
    sort_of = lambda d: {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in d["traceEvents"]  # noqa: E731
                         if e.get("ph") == "M" and e.get("name") == "thread_sort_index"}
    assert {k: sort_of(ours).get(k) for k in gpu_lanes} == {k: sort_of(ref)[k] for k in gpu_lanes}

    # envelope: torch's keys, in torch's order, the inline flag right before traceEvents
    shared = [k for k in ours if k in ref]
    assert set(shared) == set(ref) and shared == [k for k in ref if k in ours]
    assert ours["cudaGraphInlineAnnotated"] is True
    keys = list(ours)
    assert keys.index("cudaGraphInlineAnnotated") == keys.index("traceEvents") - 1


# -- behaviour the fixtures do not exercise ------------------------------------------------------

TWO_BRANCH_NODES = ("left_projection", "right_projection", "combine")  # ran on streams 7, 145, 7


def _two_branch_with(annotations):
    """The two_branch capture record with node i's annotation replaced by ``annotations[i]``."""
    ann = read_capture_record(fixture_capture("two_branch"))
    (g,) = ann.graphs
    by_scope = {n.annotation.get("name"): n for n in g.nodes}
    nodes = tuple(dataclasses.replace(by_scope[s], annotation=a) for s, a in zip(TWO_BRANCH_NODES, annotations))
    return dataclasses.replace(ann, graphs=(dataclasses.replace(g, nodes=nodes),))


def _write(tmp_path, ann, lanes, doc_edit=None):
    src = fixture_trace("two_branch")
    if doc_edit is not None:
        doc = _load(src)
        doc_edit(doc)
        src = tmp_path / "src.json"
        src.write_text(json.dumps(doc))
    trace = read_trace(src)
    out = tmp_path / "out.json"
    write_chrome_json(trace, out, join(trace, ann, lanes))
    return _load(out)


def _kernels(doc, name_prefix=""):
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


def test_values_are_strings_and_annotated_stream_only_where_asked(tmp_path):
    ann = _two_branch_with([
        {"name": "left", "stream": 60},
        {"name": "right", "layer": 3, "flag": True, "dims": [1, 2], "none": None, "ratio": 0.5},
        {},
    ])
    doc = _write(tmp_path, ann, "none")
    by_name = defaultdict(list)
    for e in _kernels(doc):
        by_name[e["args"].get("name")].append(e)
    assert len(by_name["left"]) == len(by_name["right"]) == len(by_name[None]) == 5
    for e in by_name["left"]:
        assert e["args"]["annotated_stream"] == 60 and e["tid"] == e["args"]["stream"] == 7
    for e in by_name["right"]:
        assert {k: e["args"][k] for k in ("layer", "flag", "dims", "none", "ratio")} == \
            {"layer": "3", "flag": "True", "dims": "[1, 2]", "none": "None", "ratio": "0.5"}
        assert "annotated_stream" not in e["args"] and "original_stream" not in e["args"]
    for e in by_name[None]:  # an unannotated node: torch has no entry for it, so no fields
        assert not {"annotated_stream", "original_stream", "name"} & set(e["args"])
    assert doc["cudaGraphInlineAnnotated"] is True


def test_process_group_description_names_the_lane_and_real_streams_keep_theirs(tmp_path):
    ann = _two_branch_with([
        {"name": "allreduce", "stream": 60, "Process Group Description": "tp_group"},
        {"name": "right", "stream": 7},  # from stream 145 onto the real stream 7
        {"name": "combine", "stream": 145},  # from stream 7 onto the real stream 145
    ])
    doc = _write(tmp_path, ann, "all")
    names = _thread_names(doc)
    assert names[(0, 60)] == "tp_group"
    assert names[(0, 7)] == "stream 7 " and names[(0, 145)] == "stream 145 "  # Kineto's, untouched
    assert sum(1 for e in doc["traceEvents"] if e.get("name") == "thread_name" and e["tid"] in (7, 145)) == 2
    lanes = {(e["args"]["name"], e["tid"], e["args"]["stream"], e["args"]["original_stream"]) for e in _kernels(doc)}
    assert lanes == {("allreduce", 60, 60, 7), ("right", 7, 7, 145), ("combine", 145, 145, 7)}


def test_default_stream_and_an_unmoved_event(tmp_path):
    ann = _two_branch_with([{"name": "left", "stream": 7}, {"name": "right"}, {"name": "combine"}])
    trace = read_trace(fixture_trace("two_branch"))
    out = tmp_path / "out.json"
    write_chrome_json(trace, out, join(trace, ann, "all", default_stream=145))
    doc = _load(out)
    got = {(e["args"]["name"], e["tid"], e["args"].get("original_stream"), e["args"].get("annotated_stream"))
           for e in _kernels(doc)}
    # left stays on 7 as asked (not moved: neither key), right stays on 145 (the default lane),
    # combine moves from 7 to the default lane
    assert got == {("left", 7, None, 7), ("right", 145, None, None), ("combine", 145, 7, None)}


def _add_user_annotations(doc):
    first_k = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    for tid in (7, 145):
        doc["traceEvents"].append({"ph": "X", "cat": "gpu_user_annotation", "name": "step", "pid": 0, "tid": tid,
                                   "ts": first_k["ts"], "dur": 1.0, "args": {"stream": tid}})


def test_gpu_user_annotation_on_an_emptied_lane_is_dropped(tmp_path):
    # right_projection (the only work on 145) moves to 61; combine stays on 7 (default lane)
    ann = _two_branch_with([{"name": "left", "stream": 60}, {"name": "right", "stream": 61}, {"name": "combine"}])
    doc = _write(tmp_path, ann, "all", _add_user_annotations)
    assert [e["tid"] for e in doc["traceEvents"] if e.get("cat") == "gpu_user_annotation"] == [7]
    doc = _write(tmp_path, ann, "none", _add_user_annotations)  # nothing moves: both stay
    assert sorted(e["tid"] for e in doc["traceEvents"] if e.get("cat") == "gpu_user_annotation") == [7, 145]


def test_without_annotated_nodes_nothing_changes(tmp_path):
    ann = _two_branch_with([{}, {}, {}])
    doc = _write(tmp_path, ann, "none", _add_user_annotations)
    src = _load(fixture_trace("two_branch"))
    _add_user_annotations(src)
    assert "cudaGraphInlineAnnotated" not in doc
    strip = lambda e: {**e, "args": {k: v for k, v in e.get("args", {}).items()  # noqa: E731
                                     if k not in OUR_ARGS | {"graph id", "graph node id"}}}
    assert [strip(e) for e in doc["traceEvents"]] == [strip(e) for e in src["traceEvents"]]


def test_all_without_annotations_raises_in_export_and_cli(tmp_path, capsys):
    with pytest.raises(ValueError, match="needs annotations"):
        export(_Profiler("two_branch"), tmp_path / "x.json", annotations=AnnotationSet(), graph_lanes="all")
    assert not (tmp_path / "x.json").exists()
    from perfetto_graph_ann.annotations.files import save_annotations

    bare = save_annotations(tmp_path / "bare.json", _two_branch_with([{}, {}, {}]))
    argv = ["convert", str(fixture_trace("two_branch")), "-a", str(bare), "-q"]
    assert main(argv + ["-o", str(tmp_path / "y.json"), "--graph-lanes", "all"]) == 2
    assert "needs annotations" in capsys.readouterr().err and not (tmp_path / "y.json").exists()
    # the CLI's .pftrace default stays "all", and falls back to torch's "none" when nothing is annotated
    assert main(argv + ["-o", str(tmp_path / "z.pftrace")]) == 0


# -- the README's "Compared with torch 2.15" table, kept true -----------------------------------

README = Path(__file__).parent.parent / "README.md"
TABLE_ROWS = ["annotation values", "new lane names", "a real stream's name", '`original_stream` (`"all"`)',
              '`annotated_stream` (`"none"`)', "`cudaGraphInlineAnnotated`", "`gpu_user_annotation` on a lane left empty",
              "`graph_lanes` default", "added args"]


def _readme_table():
    text = README.read_text(encoding="utf-8")
    section = text.split("## Compared with torch 2.15", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in r.strip("|").split(" | ")] for r in rows[1:])}


def test_readme_table_rows_are_the_tested_ones():
    table = _readme_table()
    assert list(table) == TABLE_ROWS
    # our JSON column says "the same" (or repeats torch's word) wherever the tests above prove it
    for row, (torch_json, our_json, _) in table.items():
        if row != "added args":
            assert our_json.startswith("the same") or our_json == torch_json, row


def test_readme_table_pftrace_column(tmp_path):
    """The .pftrace column: typed values, descriptive lane names, Kineto's stream names, join
    args on every graphed event, gpu_user_annotation dropped from a lane left empty (as torch)."""
    from support.pftrace_decode import decode

    from perfetto_graph_ann.pipeline.convert import convert

    ann = _two_branch_with([{"name": "left", "stream": 60},
                            {"name": "right", "stream": 61, "layer": 3, "flag": True, "dims": [1, 2]},
                            {"name": "combine"}])
    doc = _load(fixture_trace("two_branch"))
    _add_user_annotations(doc)
    src = tmp_path / "src.json"
    src.write_text(json.dumps(doc))
    trace = read_trace(src)
    graphed = 15  # 3 kernels x 5 replays
    for lanes in ("all", "none"):
        out = tmp_path / f"{lanes}.pftrace"
        convert(trace, out, layout=join(trace, ann, lanes))
        d = decode(out)
        kernels = [s for s in d.slices if s.cat == "kernel"]
        assert len(kernels) == graphed
        right = [s for s in kernels if s.args.get("name") == "right"]
        assert right and all((s.args["layer"], s.args["flag"], list(s.args["dims"])) == (3, True, [1, 2]) for s in right)
        # torch's rule: kept only where the lane has work after the moves (145 is emptied by "all")
        user = sorted(s.args["stream"] for s in d.slices if s.cat == "gpu_user_annotation")
        assert user == ([7] if lanes == "all" else [7, 145])
        if lanes == "all":
            assert all("original_stream" in s.args for s in kernels)  # on every graphed event
            names = {s.args["stream"]: d.track_name(s.track) for s in kernels}
            # the capture record's mark_stream labels name its lanes
            assert names == {60: "60 left_projection", 61: "61 right_projection", 7: "stream 7"}
        else:
            got = {(s.args["name"], s.args["annotated_stream"]) for s in kernels}
            assert got == {("left", 60), ("right", 61), ("combine", 7)}  # on every graphed event


def test_annotation_rendering_of_odd_values():
    from perfetto_graph_ann.write.chrome_json import torch_annotation_args

    assert torch_annotation_args({"name": "a", "stream": 61, "d": {"k": 1}, 3: 4.0}) == (
        {"name": "a", "d": "{'k': 1}", "3": "4.0"}, 61, None)
    # a stream that is no lane id names no lane (as the join treats it) instead of failing the export
    assert torch_annotation_args({"stream": "x", "Process Group Description": 7}) == (
        {"Process Group Description": "7"}, None, "7")
