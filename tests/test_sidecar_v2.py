"""Sidecar version 2: graph names, calibration notes and the capture identity survive both
forms; version-1 files (the shipped live annotations, hand-written) still load."""
from __future__ import annotations

import json
import os
import struct
import types
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfetto_graph_ann import load_annotations, save_annotations
from perfetto_graph_ann.annotations import sidecar_pb2
from perfetto_graph_ann.annotations.model import AnnotationSet, CaptureIdentity, GraphRecord, NodeRecord, make_key
from perfetto_graph_ann.capture.identity import capture_identity, process_identity

LIVE = Path(__file__).resolve().parents[1] / "perfetto_graph_ann" / "demo" / "data" / "h200_live"

IDENT = CaptureIdentity(host="gpu-node-7", pid=4242, process_start_ns=1_790_857_000_000_000_000,
                        devices=types.MappingProxyType({0: "GPU-1111", 1: "GPU-2222"}),
                        device_names=types.MappingProxyType({0: "NVIDIA H200", 1: "NVIDIA H200", 2: "NVIDIA H100"}),
                        torch_version="2.11.0+cu130", driver_version="580.65.06", cuda_driver_version=13000)


def v2_set() -> AnnotationSet:
    nodes = (NodeRecord(make_key(5, 0), "kernel", "gemm", (8, 16, 1), (128, 1, 1), {"name": "left"}, 7, 0),)
    graphs = (GraphRecord(5, nodes, name="decode bs=16"),
              GraphRecord(9, (NodeRecord(make_key(9, 0), "kernel", "add"),),
                          calibration_note="every replay before export ran under torch.profiler (CUPTI busy)"))
    return AnnotationSet(graphs, types.MappingProxyType({}), "cupti", capture=IDENT)


@pytest.mark.parametrize("name", ["a.pga", "a.json", "a.json.gz"])
def test_v2_round_trip_keeps_name_note_identity(tmp_path, name):
    p = tmp_path / name
    save_annotations(p, v2_set())
    back = load_annotations(p)
    assert [g.name for g in back.graphs] == ["decode bs=16", None]
    assert [g.calibration_note for g in back.graphs] == [
        None, "every replay before export ran under torch.profiler (CUPTI busy)"]
    assert back.capture == IDENT
    assert dict(back.capture.devices) == {0: "GPU-1111", 1: "GPU-2222"}
    assert dict(back.capture.device_names) == {0: "NVIDIA H200", 1: "NVIDIA H200", 2: "NVIDIA H100"}
    assert [g.display_name for g in back.graphs] == ["decode bs=16", "graph 9"]


def test_v2_json_layout(tmp_path):
    p = tmp_path / "a.json"
    save_annotations(p, v2_set())
    doc = json.loads(p.read_text())
    assert doc["version"] == 4
    assert doc["capture"] == {"host": "gpu-node-7", "pid": 4242, "process_start_ns": 1_790_857_000_000_000_000,
                              "devices": {"0": {"uuid": "GPU-1111", "name": "NVIDIA H200"},
                                          "1": {"uuid": "GPU-2222", "name": "NVIDIA H200"},
                                          "2": {"name": "NVIDIA H100"}},
                              "torch_version": "2.11.0+cu130", "driver_version": "580.65.06",
                              "cuda_driver_version": 13000}
    assert doc["graphs"][0]["name"] == "decode bs=16" and "calibration_note" not in doc["graphs"][0]


def test_v2_binary_fields(tmp_path):
    p = tmp_path / "a.pga"
    save_annotations(p, v2_set())
    msg = sidecar_pb2.Sidecar.FromString(p.read_bytes())
    assert msg.version == 4 and msg.capture.pid == 4242 and msg.capture.host == "gpu-node-7"
    assert [(d.index, d.uuid, d.name) for d in msg.capture.devices] == [
        (0, "GPU-1111", "NVIDIA H200"), (1, "GPU-2222", "NVIDIA H200"), (2, "", "NVIDIA H100")]
    assert not msg.capture.devices[2].HasField("uuid")
    assert msg.graphs[0].name == "decode bs=16" and not msg.graphs[0].HasField("calibration_note")


def test_shipped_v1_sidecars_load():
    for p in sorted(LIVE.glob("*.annotations.json")):
        doc = json.loads(p.read_text())
        assert doc["version"] == 1
        s = load_annotations(p)
        assert s.capture is None
        assert [g.exec_id for g in s.graphs] == [g["exec_id"] for g in doc["graphs"]]
        assert all(g.name is None and g.calibration_note is None for g in s.graphs)


def test_hand_written_v1_forms_load(tmp_path):
    doc = {"format": "perfetto_graph_ann.sidecar", "version": 1, "backend": "cupti", "lanes": {"60": "x"},
           "graphs": [{"exec_id": 3, "nodes": [{"key": (3 << 32) | 1, "kernel": "k", "annotation": {"name": "a"}}]}]}
    pj = tmp_path / "v1.json"
    pj.write_text(json.dumps(doc))
    msg = sidecar_pb2.Sidecar(magic="perfetto_graph_ann.sidecar", version=1, backend="cupti")
    g = msg.graphs.add(exec_id=3)
    g.nodes.add(key=(3 << 32) | 1, type="kernel", kernel="k")
    payload = msg.SerializeToString(deterministic=True)
    pb = tmp_path / "v1.pga"
    pb.write_bytes(payload + bytes([(15 << 3) | 5]) + struct.pack("<I", zlib.crc32(payload)))
    for p in (pj, pb):
        s = load_annotations(p)
        assert s.capture is None and [g.exec_id for g in s.graphs] == [3]
        assert s.graphs[0].nodes[0].key == (3 << 32) | 1 and s.graphs[0].name is None


@pytest.mark.parametrize("bad,problem", [
    ({"pid": "12"}, "capture.pid"),
    ({"devices": {"zero": {"uuid": "GPU-1"}}}, "capture.devices"),
    ({"devices": {"0": {"uuid": 5}}}, "capture.devices"),
    ({"host": 3}, "capture.host"),
    ([], "'capture' must be an object"),
])
def test_bad_identity_names_file_and_field(tmp_path, bad, problem):
    from perfetto_graph_ann.errors import SidecarError

    doc = {"format": "perfetto_graph_ann.sidecar", "version": 2, "graphs": [], "capture": bad}
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(SidecarError, match=problem) as e:
        load_annotations(p)
    assert str(e.value).startswith(str(p))


def test_process_identity_is_this_process():
    ident = process_identity()
    assert ident.pid == os.getpid()
    with open("/proc/self/stat") as f:  # start ticks after boot, independently parsed
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime_s = float(f.read().split()[0])
    import time

    started_s = time.time() - uptime_s + ticks / os.sysconf("SC_CLK_TCK")
    assert abs(ident.process_start_ns / 1e9 - started_s) < 2.5
    assert ident.host and ident.torch_version is None


def test_capture_identity_never_imports_torch_or_inits_cuda():
    from support.torch_guard import assert_torch_free

    assert_torch_free("import os; from perfetto_graph_ann.capture.identity import capture_identity; "
                      "c = capture_identity(); assert c.pid == os.getpid() > 0, c")


def test_registry_snapshot_carries_identity():
    from perfetto_graph_ann.capture.registry import Registry

    snap = Registry().snapshot()
    assert snap.capture is not None and snap.capture.pid == os.getpid() and snap.capture == capture_identity()


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_idents = st.builds(
    CaptureIdentity, host=st.none() | _text, pid=st.none() | st.integers(0, (1 << 63) - 1),
    process_start_ns=st.none() | st.integers(0, (1 << 63) - 1),
    devices=st.dictionaries(st.integers(0, (1 << 32) - 1), _text, max_size=3),
    device_names=st.dictionaries(st.integers(0, (1 << 32) - 1), _text, max_size=3),
    torch_version=st.none() | _text, driver_version=st.none() | _text,
    cuda_driver_version=st.none() | st.integers(0, (1 << 31) - 1))


@settings(max_examples=60, deadline=None)
@given(ident=_idents, name=st.none() | _text, note=st.none() | _text)
def test_v2_fields_round_trip_any_value(tmp_path_factory, ident, name, note):
    folder = tmp_path_factory.mktemp("rt")
    s = AnnotationSet((GraphRecord(5, (NodeRecord(make_key(5, 0)),), name=name, calibration_note=note),),
                      types.MappingProxyType({}), "cupti", capture=ident)
    for file in ("a.pga", "a.json"):
        back = load_annotations(save_annotations(folder / file, s))
        assert back.capture == ident
        assert (back.graphs[0].name, back.graphs[0].calibration_note) == (name, note)
