"""Scope instances from capture to sidecar (issue 21): the session's table with nesting,
graph names, capture records' member lists, the JSON and binary sidecar round trip and
its validation, and scope labels."""
from __future__ import annotations

import json

import pytest
from support.capture_fakes import FakeCuda, recorder_scope

from support import scope_synth
from support.join_expect import fixture_capture, load_capture
from perfetto_graph_ann import load_annotations, save_annotations
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.annotations.capture_record import capture_record_to_annotations, read_capture_record
from perfetto_graph_ann.capture.registry import Registry
from perfetto_graph_ann.annotations.scope_instances import from_ranges, scope_label
from perfetto_graph_ann.capture.scopes import ScopeRecord
from perfetto_graph_ann.errors import SidecarError

pytestmark = pytest.mark.usefixtures("capture_path")
STREAM = 0x70


def _capture(name=None):
    cuda = FakeCuda()
    cuda.begin_capture(STREAM)
    sess = S.CaptureSession(cuda, STREAM, Registry(), device=0, name=name)
    sess.start()

    cuda.launch(STREAM, "embed")
    for layer in range(2):
        with recorder_scope(sess, {"name": "layer", "layer": layer}):
            with recorder_scope(sess, "attn"):
                cuda.launch(STREAM, f"qk{layer}")
                with recorder_scope(sess, {"stream": 64}):  # a lane, not a named range
                    cuda.launch(STREAM, f"av{layer}")
            with recorder_scope(sess, "mlp"):
                cuda.launch(STREAM, f"up{layer}")
    sess.finish_capture()
    g = cuda.end_capture(STREAM)
    sess.bind_exec(cuda.instantiate(g))
    cuda.forget(g)
    return sess.record


def test_session_records_scope_instances_with_parents_and_name():
    rec = _capture("decode bs=16")
    assert rec.name == "decode bs=16" and rec.display_name == "decode bs=16"
    by_id = {s.id: s for s in rec.scopes}
    assert len(by_id) == 6  # layer, attn, mlp x 2; the lane-only block is not an instance
    k = {n.kernel: n for n in rec.nodes}
    assert k["embed"].scopes == ()
    for layer in range(2):
        chain = [by_id[i] for i in k[f"av{layer}"].scopes]
        assert [dict(s.fields) for s in chain] == [{"name": "layer", "layer": layer}, {"name": "attn"}]
        assert chain[0].parent is None and chain[1].parent == chain[0].id
        assert k[f"qk{layer}"].scopes == k[f"av{layer}"].scopes
        mlp = [by_id[i] for i in k[f"up{layer}"].scopes]
        assert dict(mlp[1].fields) == {"name": "mlp"} and mlp[0].id == chain[0].id
        assert k[f"av{layer}"].annotation == {"name": "attn", "layer": layer, "stream": 64}


def test_unnamed_graph_displays_its_id():
    rec = _capture()
    assert rec.name is None and rec.display_name == f"graph {rec.exec_id}"


def test_equal_ranges_nest_in_opening_order():
    recs = [ScopeRecord(0, {"name": "outer"}, 1, 3), ScopeRecord(1, {"name": "inner"}, 1, 3),
            ScopeRecord(2, {"name": "empty"}, 3, 3)]
    inst, per = from_ranges(recs, [10, 11, 12, 13])
    assert [(dict(s.fields)["name"], s.parent) for s in inst] == [("outer", None), ("inner", 0)]
    assert per == {11: (0, 1), 12: (0, 1)}


def test_capture_record_scopes_from_member_lists():
    ann = read_capture_record(fixture_capture("seed_block_annotated"))
    cap = load_capture("seed_block_annotated")
    g = ann.graphs[0]
    names = [dict(s.fields)["name"] for s in g.scopes]
    assert sorted(names) == sorted(s["name"] for s in cap["scopes"])
    handle_scope = {h: s["name"] for s in cap["scopes"] for h in s["nodes"]}
    exec_id = cap["exec_cupti_graph_id"]
    by_key = {n.key: n for n in g.nodes}
    for n in cap["nodes"]:
        rec = by_key[(exec_id << 32) | (n["cupti_node_id"] & 0xFFFFFFFF)]
        assert [names[i] for i in rec.scopes] == [handle_scope[n["handle"]]]


def test_capture_record_nested_members():
    doc = {"exec_cupti_graph_id": 3, "nodes": [
        {"handle": h, "type": "cudaGraphNodeTypeKernel", "cupti_node_id": (1 << 32) | i, "kernel": f"k{i}"}
        for i, h in enumerate((100, 101, 102))],
        "scopes": [{"name": "attn", "lane": None, "nodes": [101]},  # closing order: inner first
                   {"name": "layer", "lane": None, "nodes": [100, 101, 102]}]}
    g = capture_record_to_annotations(doc).graphs[0]
    names = {s.id: dict(s.fields)["name"] for s in g.scopes}
    parent = {names[s.id]: (names[s.parent] if s.parent is not None else None) for s in g.scopes}
    assert parent == {"layer": None, "attn": "layer"}
    assert [[names[i] for i in n.scopes] for n in g.nodes] == [["layer"], ["layer", "attn"], ["layer"]]


@pytest.mark.parametrize("fmt", ["json", "binary"])
def test_sidecar_round_trip_keeps_scopes_and_names(tmp_path, fmt):
    ann = scope_synth.annotations(2, "exact")
    path = tmp_path / ("a.json" if fmt == "json" else "a.pgab")
    save_annotations(path, ann, format=fmt)
    back = load_annotations(path)
    for a, b in zip(ann.graphs, back.graphs):
        assert b.name == a.name
        assert [(s.id, dict(s.fields), s.parent) for s in b.scopes] == [(s.id, dict(s.fields), s.parent) for s in a.scopes]
        assert [n.scopes for n in b.nodes] == [n.scopes for n in a.nodes]
    flat = scope_synth.annotations(1, "exact", recorded=False)
    save_annotations(path, flat, format=fmt)
    assert all(g.scopes is None for g in load_annotations(path).graphs)


@pytest.mark.parametrize("change, problem", [
    (lambda g: g["scopes"][1].update(parent=99), "unknown parent 99"),
    (lambda g: g["scopes"][0].update(parent=1), "form a cycle"),
    (lambda g: g["nodes"][0].update(scopes=[0, 42]), "unknown scope 42"),
    (lambda g: g["scopes"].append(dict(g["scopes"][0])), "share an id"),
    (lambda g: g["scopes"][0].update(fields=[1]), "'fields' must be an object"),
    (lambda g: g.pop("scopes"), "no scope table"),
])
def test_bad_scope_tables_are_refused(tmp_path, change, problem):
    path = tmp_path / "a.json"
    save_annotations(path, scope_synth.annotations(1, "exact"), format="json")
    doc = json.loads(path.read_text())
    change(doc["graphs"][0])
    path.write_text(json.dumps(doc))
    with pytest.raises(SidecarError) as e:
        load_annotations(path)
    assert str(path) in str(e.value) and problem in str(e.value)


def test_scope_labels():
    assert scope_label({"name": "layer", "layer": 3}) == "layer 3"
    assert scope_label({"name": "attn", "head": 2, "stream": 61}) == "attn head=2"
    assert scope_label({"name": "mlp"}) == "mlp"
    assert scope_label({"phase": "fwd", "causal": True}) == "phase=fwd causal=true"


@pytest.fixture
def fake_cuda(fake_torch_cuda):
    import sys

    return fake_torch_cuda, sys.modules["torch"]


def test_pga_graph_name_reaches_the_record_and_the_sidecar(fake_cuda, tmp_path):
    import perfetto_graph_ann as pga
    from perfetto_graph_ann.capture.registry import REGISTRY

    cuda, torch = fake_cuda
    g = torch.cuda.CUDAGraph()
    with pga.graph(g, calibrate=False, name="decode bs=16"):
        # backward=False: the fake torch has no autograd (not what this test is about)
        with pga.mark_kernels({"name": "layer", "layer": 0}, backward=False):
            with pga.mark_kernels("attn", backward=False):
                cuda.launch(STREAM, "qk")
    rec = REGISTRY.get(g._pga_owner)
    assert rec.name == "decode bs=16"
    assert [dict(rec.scopes[i].fields) for i in rec.nodes[0].scopes] == [{"name": "layer", "layer": 0},
                                                                          {"name": "attn"}]
    path = tmp_path / "run.json"
    save_annotations(path)
    back = load_annotations(path).graphs[0]
    assert back.name == "decode bs=16" and back.nodes[0].scopes == rec.nodes[0].scopes
    with pytest.raises(TypeError, match="graph name must be a str"):
        pga.graph(torch.cuda.CUDAGraph(), name=16)
