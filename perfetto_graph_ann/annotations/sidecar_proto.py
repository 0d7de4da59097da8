"""The sidecar's binary form: the ``Sidecar`` protobuf message (``protos/perfetto_graph_ann/sidecar.proto``)
followed by its CRC-32.

The generated module (:mod:`.sidecar_pb2`) is imported on first use, so loading a JSON
sidecar never imports protobuf's message classes.
"""
from __future__ import annotations

import struct
import types
import zlib
from typing import Any, Dict, Mapping, Tuple

from ..errors import SidecarError
from .model import NODE_TYPES, AnnotationSet, CaptureIdentity, GraphRecord, NodeRecord, ScopeInstance
from .schema import (INT64, MAGIC, READABLE_VERSIONS, VERSION, check_scopes, edges, known_versions, producer,
                     replay_thread, replay_window)

__all__ = ["from_bytes", "from_proto", "to_bytes", "to_proto"]

_CRC_TAG = bytes([(15 << 3) | 5])  # field 15, wire type fixed32


def _pb():
    from . import sidecar_pb2

    return sidecar_pb2


# ---- annotation values ----------------------------------------------------------------

def _to_value(pb, v: Any, where: str):
    out = pb.Value()
    if v is None:
        out.null_value = True
    elif isinstance(v, bool):
        out.bool_value = v
    elif isinstance(v, int):
        if not INT64[0] <= v <= INT64[1]:
            raise ValueError(f"{where}: int {v} does not fit in 64 bits")
        out.int_value = v
    elif isinstance(v, float):
        out.double_value = v
    elif isinstance(v, str):
        out.string_value = v
    elif isinstance(v, (list, tuple)):
        out.list_value.SetInParent()
        for i, x in enumerate(v):
            out.list_value.values.append(_to_value(pb, x, f"{where}[{i}]"))
    elif isinstance(v, Mapping):
        out.map_value.CopyFrom(_to_map(pb, v, where))
    else:
        raise TypeError(f"{where}: value of type {type(v).__name__} cannot be saved (int, float, bool, str, list, dict)")
    return out


def _to_map(pb, m: Mapping[str, Any], where: str):
    out = pb.ValueMap()
    for k, v in m.items():
        if not isinstance(k, str):
            raise TypeError(f"{where}: key {k!r} is not a str")
        out.fields.add(key=k, value=_to_value(pb, v, f"{where}.{k}"))
    return out


def _from_value(v, path: str, where: str) -> Any:
    kind = v.WhichOneof("kind")
    if kind is None:
        raise SidecarError(path, f"{where}: value has no type set")
    if kind == "null_value":
        return None
    if kind == "list_value":
        return [_from_value(x, path, f"{where}[{i}]") for i, x in enumerate(v.list_value.values)]
    if kind == "map_value":
        return _from_map(v.map_value, path, where)
    return getattr(v, kind)


#: The ``Value`` kinds read as they are (no list, map or null to build, nothing to name in an error)
_SCALARS = frozenset({"int_value", "double_value", "bool_value", "string_value"})


def _from_map(m, path: str, where: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for f in m.fields:  # a scalar inline: a graph's thousands of node annotations are mostly scalars
        v = f.value
        kind = v.WhichOneof("kind")
        out[f.key] = getattr(v, kind) if kind in _SCALARS else _from_value(v, path, f"{where}.{f.key}")
    return out


# ---- AnnotationSet <-> protobuf -------------------------------------------------------

def _identity_to_proto(pb, c: CaptureIdentity):
    out = pb.CaptureIdentity()
    for f in ("host", "pid", "process_start_ns", "torch_version", "driver_version", "cuda_driver_version"):
        v = getattr(c, f)
        if v is not None:
            setattr(out, f, v)
    for i in sorted(set(c.devices) | set(c.device_names)):
        d = out.devices.add(index=i)
        if i in c.devices:
            d.uuid = c.devices[i]
        if i in c.device_names:
            d.name = c.device_names[i]
    return out


def _identity_from_proto(m) -> CaptureIdentity:
    def opt(f: str) -> Any:
        return getattr(m, f) if m.HasField(f) else None

    return CaptureIdentity(
        host=opt("host"), pid=opt("pid"), process_start_ns=opt("process_start_ns"),
        devices=types.MappingProxyType({d.index: d.uuid for d in m.devices if d.HasField("uuid")}),
        device_names=types.MappingProxyType({d.index: d.name for d in m.devices if d.HasField("name")}),
        torch_version=opt("torch_version"), driver_version=opt("driver_version"),
        cuda_driver_version=opt("cuda_driver_version"))


def _replays_to_proto(pb, windows):
    out = pb.ReplayRecord()
    for w in windows:
        wm = out.windows.add(start_ns=w.start_ns, stop_ns=w.stop_ns)
        if w.pid is not None:
            wm.pid = w.pid
        for t in w.threads:
            tm = wm.threads.add(ident=t.ident, head_uncertain=t.head_uncertain, tail_uncertain=t.tail_uncertain)
            if t.native_id is not None:
                tm.native_id = t.native_id
            tm.graphs.extend(t.graphs)
            tm.starts.extend(x - w.start_ns for x in t.starts_ns)
    return out


def _replays_from_proto(m, path: str) -> tuple:
    windows = []
    for wi, w in enumerate(m.windows):
        threads = tuple(replay_thread(t.ident, t.native_id if t.HasField("native_id") else None, list(t.graphs),
                                      t.head_uncertain, t.tail_uncertain, [x + w.start_ns for x in t.starts], path,
                                      f"replay window {wi} thread {ti}")
                        for ti, t in enumerate(w.threads))
        windows.append(replay_window(w.pid if w.HasField("pid") else None, w.start_ns, w.stop_ns, threads, path,
                                     f"replay window {wi}"))
    return tuple(windows)


def to_proto(s: AnnotationSet):
    pb = _pb()
    msg = pb.Sidecar(magic=MAGIC, version=VERSION, backend=s.backend or "", producer=producer())
    if s.capture is not None:
        msg.capture.CopyFrom(_identity_to_proto(pb, s.capture))
    for lane, label in sorted(s.lanes.items()):
        msg.lanes.add(id=lane, label=label)
    if s.replays is not None:
        msg.replays.CopyFrom(_replays_to_proto(pb, s.replays))
    for g in s.graphs:  # a graph's message built once per record (a process saves its graphs each export)
        msg.graphs.add().MergeFromString(g.derived(_graph_bytes))
    return msg


def _graph_bytes(g: GraphRecord) -> bytes:
    """``g``'s ``Graph`` message, serialized: kept on the record (:meth:`GraphRecord.derived`)
    as bytes, which nothing can change, rather than as a message."""
    return _graph_to_proto(g).SerializeToString(deterministic=True)


def _graph_to_proto(g: GraphRecord):
    pb = _pb()
    gm = pb.Graph(exec_id=g.exec_id)
    if g.template_id is not None:
        gm.template_id = g.template_id
    if g.device is not None:
        gm.device = g.device
    if g.name is not None:
        gm.name = g.name
    if g.calibration_note is not None:
        gm.calibration_note = g.calibration_note
    if g.lanes is not None:
        gm.lanes.SetInParent()  # present even when empty: "this graph labelled no lane"
        for lane, label in sorted(g.lanes.items()):
            gm.lanes.lanes.add(id=lane, label=label)
    if g.scopes is not None:
        gm.scopes.SetInParent()  # present even when empty: "this capture had no scopes"
        for sc in g.scopes:
            sm = gm.scopes.scopes.add(id=sc.id)
            if sc.fields:
                sm.fields.CopyFrom(_to_map(pb, sc.fields, f"graph {g.exec_id} scope {sc.id} fields"))
            if sc.parent is not None:
                sm.parent = sc.parent
    if g.edges is not None:
        gm.edges.SetInParent()  # present even when empty: "recorded, no edge"
        gm.edges.src.extend(e.src for e in g.edges)
        gm.edges.dst.extend(e.dst for e in g.edges)
        if any(e.type or e.from_port for e in g.edges):
            gm.edges.type.extend(e.type for e in g.edges)
            gm.edges.from_port.extend(e.from_port for e in g.edges)
    for n in g.nodes:
        nm = gm.nodes.add(key=n.key, type=n.type)
        if n.kernel is not None:
            nm.kernel = n.kernel
        if n.grid is not None:
            nm.grid.x, nm.grid.y, nm.grid.z = n.grid
        if n.block is not None:
            nm.block.x, nm.block.y, nm.block.z = n.block
        if n.annotation:
            nm.annotation.CopyFrom(_to_map(pb, n.annotation, f"node {n.key} annotation"))
        if n.stream is not None and n.ordinal is not None:
            nm.calibration.stream, nm.calibration.ordinal = n.stream, n.ordinal
        if n.scopes:
            nm.scopes.extend(n.scopes)
    return gm


_NODE_TYPES = frozenset(NODE_TYPES)
_new = object.__new__


def _node_record(key: int, type_: str, kernel: Any, grid: Any, block: Any, annotation: Dict[str, Any], stream: Any,
                 ordinal: Any, scopes: Tuple[int, ...]) -> NodeRecord:
    """``NodeRecord(...)`` without the frozen dataclass's ``__init__`` (one ``object.__setattr__``
    a field): a sidecar holds thousands of nodes a graph. The same fields, so an equal record."""
    r = _new(NodeRecord)
    r.__dict__.update(key=key, type=type_, kernel=kernel, grid=grid, block=block, annotation=annotation,
                      stream=stream, ordinal=ordinal, scopes=scopes)
    return r


def from_proto(msg, path: str) -> AnnotationSet:
    if msg.magic != MAGIC:
        raise SidecarError(path, f"not an annotation sidecar (magic {msg.magic!r})")
    if msg.version not in READABLE_VERSIONS:
        raise SidecarError(path, f"sidecar version {msg.version} is not supported (this reader knows "
                                 f"{known_versions()}); upgrade perfetto_graph_ann")
    graphs = []
    for gi, g in enumerate(msg.graphs):
        nodes = []
        exec_id = g.exec_id
        for ni, n in enumerate(g.nodes):  # a graph's thousands of nodes: each field read once, no error text made
            key, type_ = n.key, n.type
            if type_ not in _NODE_TYPES:
                raise SidecarError(path, f"graph {gi} node {ni}: unknown node type {type_!r}")
            if key >> 32 != exec_id:
                raise SidecarError(path, f"graph {gi} node {ni}: key {key} does not belong to graph {exec_id}")
            has = n.HasField
            cal = n.calibration if has("calibration") else None
            grid = block = None
            if has("grid"):
                d = n.grid
                grid = (d.x, d.y, d.z)
            if has("block"):
                d = n.block
                block = (d.x, d.y, d.z)
            nodes.append(_node_record(key, type_, n.kernel if has("kernel") else None, grid, block,
                                      _from_map(n.annotation, path, f"graph {gi} node {ni} annotation")
                                      if has("annotation") else {},
                                      cal.stream if cal else None, cal.ordinal if cal else None, tuple(n.scopes)))
        glanes = types.MappingProxyType({ln.id: ln.label for ln in g.lanes.lanes}) if g.HasField("lanes") else None
        scopes = None
        if g.HasField("scopes"):
            scopes = tuple(ScopeInstance(sc.id, types.MappingProxyType(_from_map(sc.fields, path, f"graph {gi} scope {sc.id} fields")),
                                         sc.parent if sc.HasField("parent") else None) for sc in g.scopes.scopes)
        check_scopes(scopes, nodes, path, f"graph {gi}")
        gedges = None
        if g.HasField("edges"):
            ge = g.edges
            gedges = edges(list(ge.src), list(ge.dst), list(ge.type), list(ge.from_port), nodes, msg.version, path,
                           f"graph {gi}")
        graphs.append(GraphRecord(exec_id=g.exec_id, nodes=tuple(nodes),
                                  template_id=g.template_id if g.HasField("template_id") else None,
                                  device=g.device if g.HasField("device") else None, lanes=glanes,
                                  name=g.name if g.HasField("name") else None,
                                  calibration_note=g.calibration_note if g.HasField("calibration_note") else None,
                                  scopes=scopes, edges=gedges))
    lanes = {ln.id: ln.label for ln in msg.lanes}
    capture = _identity_from_proto(msg.capture) if msg.HasField("capture") else None
    replays = _replays_from_proto(msg.replays, path) if msg.HasField("replays") else None
    return AnnotationSet(tuple(graphs), types.MappingProxyType(lanes), msg.backend or None, path, capture, replays)


def to_bytes(s: AnnotationSet) -> bytes:
    """Binary form: the Sidecar message, then its CRC-32 as field 15 (written last)."""
    payload = to_proto(s).SerializeToString(deterministic=True)
    return payload + _CRC_TAG + struct.pack("<I", zlib.crc32(payload))


def from_bytes(data: bytes, path: str) -> AnnotationSet:
    from google.protobuf.message import DecodeError

    if len(data) < 5 or data[-5:-4] != _CRC_TAG:
        raise SidecarError(path, "truncated sidecar: the closing checksum is missing")
    payload, (crc,) = data[:-5], struct.unpack("<I", data[-4:])
    if zlib.crc32(payload) != crc:
        raise SidecarError(path, "corrupt or truncated sidecar: checksum mismatch")
    try:
        msg = _pb().Sidecar.FromString(data)
    except DecodeError as e:
        raise SidecarError(path, f"corrupt sidecar: {e}") from e
    return from_proto(msg, path)
