"""Joining with the annotation files a user actually passes: the same sidecar twice (a shell
glob, a script adding --annotations again, a copy) must join exactly like passing it once
(before: every match tied with its own duplicate and was flagged ambiguous)."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest

from support.join_expect import calibrated_expectation, fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.files import load_annotation_files, load_annotations, save_annotations
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace


@pytest.mark.parametrize("name", ["two_branch", "seed_block_annotated"])
@pytest.mark.parametrize("second", ["same path", "copy", "json sidecar of it"])
def test_the_same_annotations_twice_join_like_once(tmp_path, capsys, name, second):
    cap = fixture_capture(name)
    if second == "same path":
        other = cap
    elif second == "copy":
        other = tmp_path / "copy.capture.json"
        shutil.copyfile(cap, other)
    else:
        other = save_annotations(tmp_path / "saved.json", load_annotations(cap))
    trace = read_trace(fixture_trace(name))
    layout = join(trace, load_annotation_files([cap, other]), "all")
    expect = calibrated_expectation(name)
    assert layout.report.ambiguous == 0 and layout.report.unmatched == 0
    assert layout.report.matched["calibrated"] == len(expect)
    assert {i: (p.lane, p.args["graph node id"]) for i, p in layout.placements.items()} == \
        {i: (x["lane"], x["key"]) for i, x in expect.items()}
    assert main(["lanes", str(fixture_trace(name)), "-a", str(cap), "-a", str(other), "--no-sql"]) == 0
    assert re.search(r"ambiguous \(of matched\)\s+0\b", capsys.readouterr().out)


def test_two_different_graphs_with_one_exec_id_still_tie(tmp_path):
    """Only exact duplicates collapse: two sidecars that disagree about one graph are a real
    conflict and stay ambiguous."""
    cap = fixture_capture("two_branch")
    a = load_annotations(cap)
    g = a.graphs[0]
    renamed = dataclasses.replace(g, nodes=tuple(dataclasses.replace(n, annotation={**n.annotation, "name": "other"})
                                                 for n in g.nodes))
    other = save_annotations(tmp_path / "other.json", dataclasses.replace(a, graphs=(renamed,)))
    layout = join(read_trace(fixture_trace("two_branch")), load_annotation_files([cap, other]))
    assert layout.report.ambiguous == layout.report.graphed == 15
    doc = json.loads(open(other).read())
    assert doc["graphs"][0]["exec_id"] == g.exec_id


@pytest.mark.parametrize("name", ["two_branch", "seed_block_annotated"])
def test_a_json_sidecar_edited_by_an_editor_that_adds_a_bom_still_loads(tmp_path, name):
    """The JSON sidecar is the form "for humans"; Windows editors save UTF-8 with a BOM, which
    was reported as 'not an annotation sidecar'."""
    plain = save_annotations(tmp_path / "a.json", load_annotations(fixture_capture(name)))
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + open(plain, "rb").read())
    got, want = load_annotations(bom), load_annotations(plain)
    assert (got.graphs, dict(got.lanes), got.backend) == (want.graphs, dict(want.lanes), want.backend)
    cap = tmp_path / "bom.capture.json"  # a capture record too
    cap.write_bytes(b"\xef\xbb\xbf" + fixture_capture(name).read_bytes())
    assert load_annotations(cap).graphs == load_annotations(fixture_capture(name)).graphs
