"""read_capture_record: the fixtures' capture records -> AnnotationSet, and bad input."""
from __future__ import annotations

import json

import pytest

from support.join_expect import fixture_capture, label_lanes, load_capture
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.errors import GraphAnnError, SidecarError


@pytest.mark.parametrize("name", ["seed_block_annotated", "two_branch"])
def test_fixture_records(name):
    cap = load_capture(name)
    a = read_capture_record(fixture_capture(name))
    (g,) = a.graphs
    assert g.exec_id == cap["exec_cupti_graph_id"] and g.calibrated
    labels = label_lanes(cap)
    assert dict(a.lanes) == {v: k for k, v in labels.items()}
    assert len(g.nodes) == len(cap["nodes"])
    for n, raw in zip(g.nodes, cap["nodes"]):
        assert n.key == (cap["exec_cupti_graph_id"] << 32) | (raw["cupti_node_id"] & 0xFFFFFFFF)
        assert n.type == "kernel" and n.kernel == raw["kernel"]
        assert list(n.grid) == raw["grid"] and list(n.block) == raw["block"]
        assert n.annotation["name"] == raw["scope"]
        lane = raw["lane"]
        assert n.lane == (labels[lane] if isinstance(lane, str) else lane)
        cal = cap["calibration"][str(n.key)]
        assert (n.stream, n.ordinal) == (cal["stream"], cal["ordinal"])


def _write(tmp_path, doc, name="bad.capture.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


@pytest.mark.parametrize("doc,problem", [
    ("{not json", "not valid JSON"),
    ({"nodes": []}, "not a capture record"),
    ({"exec_cupti_graph_id": -1, "nodes": []}, "exec_cupti_graph_id"),
    ({"exec_cupti_graph_id": 1, "nodes": [{"cupti_node_id": "x"}]}, "nodes[0].cupti_node_id"),
    ({"exec_cupti_graph_id": 1, "nodes": [{"cupti_node_id": 1, "grid": [1, 2]}]}, "nodes[0].grid"),
    ({"exec_cupti_graph_id": 1, "nodes": [{"cupti_node_id": 1}, {"cupti_node_id": 1}]}, "duplicate node key"),
    ({"exec_cupti_graph_id": 1, "nodes": [{"cupti_node_id": 1, "lane": 1.5}]}, "lane"),
    ({"exec_cupti_graph_id": 1, "nodes": [], "calibration": {"99": {"stream": 7, "ordinal": 0}}}, "not among the nodes"),
    ({"exec_cupti_graph_id": 1, "nodes": [], "calibration": {"zz": {}}}, "calibration key"),
])
def test_bad_records(tmp_path, doc, problem):
    p = _write(tmp_path, doc)
    with pytest.raises(SidecarError) as info:
        read_capture_record(p)
    assert str(info.value).startswith(str(p))
    assert problem in str(info.value)
    assert isinstance(info.value, GraphAnnError)


def test_missing_file(tmp_path):
    with pytest.raises(SidecarError, match="no such file"):
        read_capture_record(tmp_path / "nope.json")


def test_nested_scopes_merge_inner_wins(tmp_path):
    doc = {"exec_cupti_graph_id": 3,
           "nodes": [{"handle": 1, "type": "cudaGraphNodeTypeKernel", "cupti_node_id": 5, "scope": "inner", "lane": None},
                     {"handle": 2, "type": "cudaGraphNodeTypeMemset", "cupti_node_id": 6, "scope": "outer", "lane": "side"}],
           "scopes": [{"name": "inner", "lane": None, "nodes": [1]}, {"name": "outer", "lane": "side", "nodes": [1, 2]}]}
    a = read_capture_record(_write(tmp_path, doc))
    n1, n2 = a.graphs[0].nodes
    assert dict(n1.annotation) == {"name": "inner", "stream": 60}  # outer's lane, inner's name
    assert dict(n2.annotation) == {"name": "outer", "stream": 60}
    assert n2.type == "memset" and n1.key == (3 << 32) | 5
    assert dict(a.lanes) == {60: "side"}


def test_labels_skip_integer_lanes(tmp_path):
    doc = {"exec_cupti_graph_id": 1, "nodes": [{"cupti_node_id": 0, "scope": "a", "lane": 60},
                                                  {"cupti_node_id": 1, "scope": "b", "lane": "lbl"}]}
    a = read_capture_record(_write(tmp_path, doc))
    assert [n.lane for n in a.graphs[0].nodes] == [60, 61] and dict(a.lanes) == {61: "lbl"}
