"""The annotation sidecar: binary and JSON round trips, auto-detection, errors, schema freshness."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import re
import struct
import types
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.join_expect import fixture_capture, fixture_trace

from perfetto_graph_ann import load_annotations, save_annotations
from perfetto_graph_ann.annotations import _protogen, sidecar_json, sidecar_proto
from perfetto_graph_ann.annotations.model import AnnotationSet, GraphRecord, NodeRecord, make_key
from perfetto_graph_ann.errors import SidecarError


def sample() -> AnnotationSet:
    nodes = (
        NodeRecord(make_key(5, 0), "kernel", "sm80_gemm", (8, 16, 1), (128, 1, 1),
                   {"name": "left", "stream": 60, "layer": 3, "scale": 0.5, "ok": True, "dims": [1, 2.5, "x"],
                    "meta": {"a": None, "b": {"c": -7}}}, 7, 0),
        NodeRecord(make_key(5, 1), "memset", None, None, None, {"name": "zero"}, 7, 1),
        NodeRecord(make_key(5, 2), "empty"),
        NodeRecord(make_key(5, 3), "kernel", "add", (1024, 1, 1), (128, 1, 1), {"Collective name": "allreduce",
                                                                               "In msg nelems": 1 << 40}, 145, 0),
    )
    return AnnotationSet((GraphRecord(5, nodes, template_id=4, device=0), GraphRecord(9, ())),
                         types.MappingProxyType({60: "left_projection", 62: "default_pg (all_reduce)"}), "cupti")


def same(a: AnnotationSet, b: AnnotationSet) -> None:
    assert a.graphs == b.graphs and dict(a.lanes) == dict(b.lanes) and a.backend == b.backend
    for ga, gb in zip(a.graphs, b.graphs):  # types survive: 1 stays int, 0.5 float, True bool
        for na, nb in zip(ga.nodes, gb.nodes):
            assert json.dumps(dict(na.annotation), sort_keys=True) == json.dumps(dict(nb.annotation), sort_keys=True)
            assert [type(v) for v in na.annotation.values()] == [type(v) for v in nb.annotation.values()]


@pytest.mark.parametrize("name", ["a.pga", "a.pga.gz", "a.json", "a.json.gz", "noext"])
def test_round_trip_every_form(tmp_path, name):
    p = tmp_path / name
    save_annotations(p, sample())
    back = load_annotations(p)
    same(sample(), back)
    assert back.source == str(p)
    raw = p.read_bytes()
    if name.endswith(".gz"):
        raw = gzip.decompress(raw)
    assert raw.startswith(b"{") == (".json" in name)


def test_json_form_is_readable_and_typed(tmp_path):
    p = tmp_path / "a.json"
    save_annotations(p, sample())
    doc = json.loads(p.read_text())
    assert doc["format"] == "perfetto_graph_ann.sidecar" and doc["version"] == 4
    n0 = doc["graphs"][0]["nodes"][0]
    assert n0["key"] == (5 << 32) and n0["grid"] == [8, 16, 1] and n0["calibration"] == {"stream": 7, "ordinal": 0}
    assert n0["annotation"]["layer"] == 3 and n0["annotation"]["scale"] == 0.5
    assert doc["lanes"] == {"60": "left_projection", "62": "default_pg (all_reduce)"}


def test_format_argument_overrides_name(tmp_path):
    p = tmp_path / "x.bin"
    save_annotations(p, sample(), format="json")
    assert p.read_bytes().startswith(b"{")
    with pytest.raises(ValueError):
        save_annotations(p, sample(), format="pickle")


values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10)


@settings(max_examples=60, deadline=None)
@given(ann=st.dictionaries(st.text(max_size=6), values, max_size=4))
def test_any_json_like_annotation_round_trips_exactly(ann):
    s = AnnotationSet((GraphRecord(1, (NodeRecord(make_key(1, 0), annotation=ann),)),))
    b = sidecar_proto.from_bytes(sidecar_proto.to_bytes(s), "mem")
    j = sidecar_json.from_json(json.loads(json.dumps(sidecar_json.to_json(s))), "mem")
    for back in (b, j):
        got = back.graphs[0].nodes[0].annotation
        assert got == ann
        assert repr(got) == repr(ann)  # int vs float vs bool kept apart


def test_unsaveable_values_are_rejected():
    bad = AnnotationSet((GraphRecord(1, (NodeRecord(make_key(1, 0), annotation={"x": object()}),)),))
    with pytest.raises(TypeError, match="cannot be saved"):
        sidecar_proto.to_bytes(bad)
    big = AnnotationSet((GraphRecord(1, (NodeRecord(make_key(1, 0), annotation={"x": 1 << 64}),)),))
    with pytest.raises(ValueError, match="64 bits"):
        sidecar_proto.to_bytes(big)


def test_every_truncation_of_the_binary_form_is_an_error(tmp_path):
    data = sidecar_proto.to_bytes(sample())
    p = tmp_path / "t.pga"
    for cut in range(0, len(data)):
        p.write_bytes(data[:cut])
        with pytest.raises(SidecarError) as e:
            load_annotations(p)
        assert str(e.value).startswith(str(p) + ": ")


def test_flipped_byte_is_caught_by_checksum(tmp_path):
    data = bytearray(sidecar_proto.to_bytes(sample()))
    data[len(data) // 2] ^= 0x40
    p = tmp_path / "f.pga"
    p.write_bytes(bytes(data))
    with pytest.raises(SidecarError, match="checksum|corrupt"):
        load_annotations(p)


def _binary_with(mutate) -> bytes:
    msg = sidecar_proto.to_proto(sample())
    mutate(msg)
    payload = msg.SerializeToString()
    return payload + bytes([0x7D]) + struct.pack("<I", zlib.crc32(payload))


@pytest.mark.parametrize("mutate,problem", [
    (lambda m: setattr(m, "version", 5), "version 5 is not supported"),
    (lambda m: m.graphs[0].nodes[0].__setattr__("type", "warp"), "unknown node type 'warp'"),
    (lambda m: m.graphs[0].nodes[0].__setattr__("key", 77), "does not belong to graph 5"),
    (lambda m: m.graphs[0].nodes[0].annotation.fields[0].value.Clear(), "value has no type set"),
])
def test_binary_semantic_errors(tmp_path, mutate, problem):
    p = tmp_path / "s.pga"
    p.write_bytes(_binary_with(mutate))
    with pytest.raises(SidecarError, match=problem) as e:
        load_annotations(p)
    assert str(e.value).startswith(str(p))


def _json_doc():
    return sidecar_json.to_json(sample())


@pytest.mark.parametrize("mutate,problem", [
    (lambda d: d.update(version=99), "version 99 is not supported"),
    (lambda d: d.update(version="1"), "'version' must be an int"),
    (lambda d: d.update(format="other"), "not an annotation sidecar"),
    (lambda d: d.update(graphs={}), "'graphs' must be a list"),
    (lambda d: d["graphs"][0].update(exec_id="5"), "'exec_id' must be a 32-bit int"),
    (lambda d: d["graphs"][0]["nodes"][0].update(key=1.5), "'key' must be an int"),
    (lambda d: d["graphs"][0]["nodes"][0].update(grid=[1, 2]), "list of 3 unsigned 32-bit ints"),
    (lambda d: d["graphs"][0]["nodes"][0].update(calibration={"stream": "7", "ordinal": 0}), "calibration"),
    (lambda d: d["graphs"][0]["nodes"][0].update(annotation=[1]), "'annotation' must be an object"),
    (lambda d: d.update(lanes={"x": "y"}), "lanes: bad entry"),
])
def test_json_type_errors(tmp_path, mutate, problem):
    doc = _json_doc()
    mutate(doc)
    p = tmp_path / "s.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(SidecarError, match=problem) as e:
        load_annotations(p)
    assert str(e.value).startswith(str(p) + ": ")


@pytest.mark.parametrize("content,problem", [
    (b"", r"the file is empty \(0 bytes\)"),
    (b'{"format": "perfetto_graph_ann.sidecar", "version": 1, "graphs": [', "not valid JSON"),
    (b'{"format": "perfetto_graph_ann.sidecar", "version": NaN, "graphs": []}', "not valid JSON"),
    (b"[" * 100000, "nested too deeply"),
    (b"\x1f\x8b\x08\x00garbage", "gzip data is truncated or corrupt"),
    (pickle.dumps({"a": 1}), "neither the binary form nor JSON"),
])
def test_garbage_inputs(tmp_path, content, problem):
    p = tmp_path / "g.bin"
    p.write_bytes(content)
    with pytest.raises(SidecarError, match=problem):
        load_annotations(p)


def test_missing_file(tmp_path):
    with pytest.raises(SidecarError, match=r"nope\.pga: no such file$"):
        load_annotations(tmp_path / "nope.pga")


def test_fixture_capture_record_is_delegated_and_round_trips(tmp_path):
    rec = load_annotations(fixture_capture("seed_block_annotated"))
    raw = json.loads(fixture_capture("seed_block_annotated").read_text())
    g = rec.graphs[0]
    assert g.exec_id == raw["exec_cupti_graph_id"] and len(g.nodes) == len(raw["nodes"])
    # every calibrated key of the record is a node key, with its stream and ordinal
    for k, v in raw["calibration"].items():
        n = rec.nodes_by_key()[int(k)]
        assert (n.stream, n.ordinal) == (v["stream"], v["ordinal"])
    p = tmp_path / "r.pga"
    save_annotations(p, rec)
    same(rec, load_annotations(p))


def test_save_is_atomic_on_error(tmp_path):
    p = tmp_path / "keep.pga"
    save_annotations(p, sample())
    before = p.read_bytes()
    bad = AnnotationSet((GraphRecord(1, (NodeRecord(make_key(1, 0), annotation={"x": {1, 2}}),)),))
    with pytest.raises(TypeError):
        save_annotations(p, bad)
    assert p.read_bytes() == before and os.listdir(tmp_path) == ["keep.pga"]


def test_generated_module_matches_proto():
    """The committed sidecar_pb2.py was generated from the committed .proto."""
    text = _protogen.MODULE.read_text()
    assert f"# proto sha256: {_protogen.proto_sha256()}\n" in text
    from perfetto_graph_ann.annotations import sidecar_pb2

    fields = {f.name: f.number for f in sidecar_pb2.Sidecar.DESCRIPTOR.fields}
    assert fields == {"magic": 1, "version": 2, "backend": 3, "graphs": 4, "lanes": 5, "producer": 6, "capture": 7,
                      "replays": 8, "crc32": 15}


def test_generated_module_regenerates_identically():
    pytest.importorskip("grpc_tools", reason="regeneration needs grpcio-tools (dev extra)")
    assert _protogen.generate() == _protogen.MODULE.read_text()


def test_a_trace_given_as_annotations_gets_a_hint(tmp_path):
    """Passing the profiler trace where annotations belong is a common slip: say so."""
    p = tmp_path / "trace.json"
    p.write_bytes(gzip.decompress(fixture_trace("two_branch").read_bytes()))
    with pytest.raises(SidecarError) as ei:
        load_annotations(p)
    msg = str(ei.value)
    assert msg.startswith(str(p)) and "profiler trace" in msg and '"format"' in msg
