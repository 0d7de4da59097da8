"""Save and load annotations: the versioned sidecar (``protos/perfetto_graph_ann/sidecar.proto``).

Two forms of the same content: binary protobuf (default) and JSON for humans (a path
ending in ``.json`` / ``.json.gz``). ``load_annotations`` tells them apart by content,
and also reads the fixtures' capture records (``*.capture.json``). Nothing is pickled or
evaluated; every problem is a :class:`~perfetto_graph_ann.errors.SidecarError` whose
message starts with the path.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
import types
import zlib
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from .. import formats
from ..errors import PathLike, SidecarError
from ..util.atomic import atomic_write_bytes
from .annotations import NODE_TYPES, AnnotationSet, CaptureIdentity, GraphRecord, NodeRecord, ScopeInstance

MAGIC = formats.SIDECAR_MAGIC
#: Version written. 2 added the capture identity, graph names and calibration notes.
VERSION = 2
#: Versions read (a version-1 file simply has none of version 2's fields).
READABLE_VERSIONS = (1, 2)
_CRC_TAG = bytes([(15 << 3) | 5])  # field 15, wire type fixed32
_INT64 = (-(1 << 63), (1 << 63) - 1)


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
        if not _INT64[0] <= v <= _INT64[1]:
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


def _from_map(m, path: str, where: str) -> Dict[str, Any]:
    return {f.key: _from_value(f.value, path, f"{where}.{f.key}") for f in m.fields}


# ---- AnnotationSet <-> protobuf -------------------------------------------------------

def _producer() -> str:
    from .. import __version__

    return f"perfetto_graph_ann {__version__}"


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


def to_proto(s: AnnotationSet):
    pb = _pb()
    msg = pb.Sidecar(magic=MAGIC, version=VERSION, backend=s.backend or "", producer=_producer())
    if s.capture is not None:
        msg.capture.CopyFrom(_identity_to_proto(pb, s.capture))
    for lane, label in sorted(s.lanes.items()):
        msg.lanes.add(id=lane, label=label)
    for g in s.graphs:
        gm = msg.graphs.add(exec_id=g.exec_id)
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
    return msg


def from_proto(msg, path: str) -> AnnotationSet:
    if msg.magic != MAGIC:
        raise SidecarError(path, f"not an annotation sidecar (magic {msg.magic!r})")
    if msg.version not in READABLE_VERSIONS:
        raise SidecarError(path, f"sidecar version {msg.version} is not supported (this reader knows "
                                 f"{_known_versions()}); upgrade perfetto_graph_ann")
    graphs = []
    for gi, g in enumerate(msg.graphs):
        nodes = []
        for ni, n in enumerate(g.nodes):
            where = f"graph {gi} node {ni}"
            if n.type not in NODE_TYPES:
                raise SidecarError(path, f"{where}: unknown node type {n.type!r}")
            if n.key >> 32 != g.exec_id:
                raise SidecarError(path, f"{where}: key {n.key} does not belong to graph {g.exec_id}")
            cal = n.calibration if n.HasField("calibration") else None
            nodes.append(NodeRecord(
                key=n.key, type=n.type, kernel=n.kernel if n.HasField("kernel") else None,
                grid=(n.grid.x, n.grid.y, n.grid.z) if n.HasField("grid") else None,
                block=(n.block.x, n.block.y, n.block.z) if n.HasField("block") else None,
                annotation=_from_map(n.annotation, path, f"{where} annotation"),
                stream=cal.stream if cal else None, ordinal=cal.ordinal if cal else None,
                scopes=tuple(n.scopes)))
        glanes = types.MappingProxyType({ln.id: ln.label for ln in g.lanes.lanes}) if g.HasField("lanes") else None
        scopes = None
        if g.HasField("scopes"):
            scopes = tuple(ScopeInstance(sc.id, types.MappingProxyType(_from_map(sc.fields, path, f"graph {gi} scope {sc.id} fields")),
                                         sc.parent if sc.HasField("parent") else None) for sc in g.scopes.scopes)
        _check_scopes(scopes, nodes, path, f"graph {gi}")
        graphs.append(GraphRecord(exec_id=g.exec_id, nodes=tuple(nodes),
                                  template_id=g.template_id if g.HasField("template_id") else None,
                                  device=g.device if g.HasField("device") else None, lanes=glanes,
                                  name=g.name if g.HasField("name") else None,
                                  calibration_note=g.calibration_note if g.HasField("calibration_note") else None,
                                  scopes=scopes))
    lanes = {ln.id: ln.label for ln in msg.lanes}
    capture = _identity_from_proto(msg.capture) if msg.HasField("capture") else None
    return AnnotationSet(tuple(graphs), types.MappingProxyType(lanes), msg.backend or None, path, capture)


def _scope_json(sc: ScopeInstance, exec_id: int) -> Dict[str, Any]:
    d: Dict[str, Any] = {"id": sc.id, "fields": _json_value(sc.fields, f"graph {exec_id} scope {sc.id} fields")}
    if sc.parent is not None:
        d["parent"] = sc.parent
    return d


def _json_scopes(raw: Any, path: str, where: str) -> Tuple[ScopeInstance, ...]:
    """A graph's ``scopes`` list: ``[{"id", "fields", "parent"?}]``."""
    _want(isinstance(raw, list), path, f"{where}: 'scopes' must be a list")
    out = []
    for k, sc in enumerate(raw):
        w = f"{where} scope {k}"
        _want(isinstance(sc, dict) and set(sc) <= {"id", "fields", "parent"}, path,
              f"{w}: must be an object with 'id', 'fields' and optionally 'parent'")
        sid, fields, parent = sc.get("id"), sc.get("fields", {}), sc.get("parent")
        _want(_is_int(sid) and 0 <= sid < 1 << 32, path, f"{w}: 'id' must be a 32-bit int, got {sid!r}")
        _want(isinstance(fields, dict), path, f"{w}: 'fields' must be an object")
        check_annotation_value(fields, path, f"{w} fields")
        _want(parent is None or (_is_int(parent) and 0 <= parent < 1 << 32), path,
              f"{w}: 'parent' must be a scope id or absent, got {parent!r}")
        out.append(ScopeInstance(sid, types.MappingProxyType(dict(fields)), parent))
    return tuple(out)


def _check_scopes(scopes: Optional[Tuple[ScopeInstance, ...]], nodes: List[NodeRecord], path: str, where: str) -> None:
    """Scope ids unique, parents and node references known, no parent cycle."""
    if scopes is None:
        for n in nodes:
            _want(not n.scopes, path, f"{where}: node {n.key} lists scopes but the graph has no scope table")
        return
    ids = {sc.id: sc for sc in scopes}
    _want(len(ids) == len(scopes), path, f"{where}: two scopes share an id")
    for sc in scopes:
        seen = {sc.id}
        p = sc.parent
        while p is not None:
            _want(p in ids, path, f"{where}: scope {sc.id} has an unknown parent {p}")
            _want(p not in seen, path, f"{where}: scope {sc.id}'s parents form a cycle")
            seen.add(p)
            p = ids[p].parent
    for n in nodes:
        for s in n.scopes:
            _want(s in ids, path, f"{where}: node {n.key} refers to unknown scope {s}")


def _known_versions() -> str:
    return ", ".join(map(str, READABLE_VERSIONS))


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


# ---- JSON form -----------------------------------------------------------------------

def _json_value(v: Any, where: str) -> Any:
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{where}: {v} cannot be written as JSON")
        return v
    if isinstance(v, (list, tuple)):
        return [_json_value(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if isinstance(v, Mapping):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: key {k!r} is not a str")
            out[k] = _json_value(x, f"{where}.{k}")
        return out
    raise TypeError(f"{where}: value of type {type(v).__name__} cannot be saved (int, float, bool, str, list, dict)")


def to_json(s: AnnotationSet) -> Dict[str, Any]:
    graphs = []
    for g in s.graphs:
        nodes = []
        for n in g.nodes:
            d: Dict[str, Any] = {"key": n.key, "type": n.type}
            if n.kernel is not None:
                d["kernel"] = n.kernel
            if n.grid is not None:
                d["grid"] = list(n.grid)
            if n.block is not None:
                d["block"] = list(n.block)
            if n.annotation:
                d["annotation"] = _json_value(n.annotation, f"node {n.key} annotation")
            if n.stream is not None and n.ordinal is not None:
                d["calibration"] = {"stream": n.stream, "ordinal": n.ordinal}
            if n.scopes:
                d["scopes"] = list(n.scopes)
            nodes.append(d)
        gd: Dict[str, Any] = {"exec_id": g.exec_id}
        if g.template_id is not None:
            gd["template_id"] = g.template_id
        if g.device is not None:
            gd["device"] = g.device
        if g.lanes is not None:
            gd["lanes"] = {str(k): v for k, v in sorted(g.lanes.items())}
        if g.name is not None:
            gd["name"] = g.name
        if g.calibration_note is not None:
            gd["calibration_note"] = g.calibration_note
        if g.scopes is not None:
            gd["scopes"] = [_scope_json(sc, g.exec_id) for sc in g.scopes]
        gd["nodes"] = nodes
        graphs.append(gd)
    doc: Dict[str, Any] = {"format": MAGIC, "version": VERSION, "producer": _producer(), "backend": s.backend}
    if s.capture is not None:
        doc["capture"] = _identity_to_json(s.capture)
    doc["lanes"] = {str(k): v for k, v in sorted(s.lanes.items())}
    doc["graphs"] = graphs
    return doc


def _identity_to_json(c: CaptureIdentity) -> Dict[str, Any]:
    """``{"host", "pid", "process_start_ns", "devices": {"0": {"uuid", "name"}}, "torch_version", ...}``;
    unknown fields are left out."""
    out: Dict[str, Any] = {}
    for f in ("host", "pid", "process_start_ns"):
        if getattr(c, f) is not None:
            out[f] = getattr(c, f)
    devices: Dict[str, Dict[str, str]] = {}
    for i in sorted(set(c.devices) | set(c.device_names)):
        d = devices[str(i)] = {}
        if i in c.devices:
            d["uuid"] = c.devices[i]
        if i in c.device_names:
            d["name"] = c.device_names[i]
    if devices:
        out["devices"] = devices
    for f in ("torch_version", "driver_version", "cuda_driver_version"):
        if getattr(c, f) is not None:
            out[f] = getattr(c, f)
    return out


def _identity_from_json(doc: Any, path: str) -> CaptureIdentity:
    _want(isinstance(doc, dict), path, "'capture' must be an object")
    for f in ("host", "torch_version", "driver_version"):
        _want(doc.get(f) is None or isinstance(doc[f], str), path, f"capture.{f} must be a string, got {doc.get(f)!r}")
    for f, bits in (("pid", 63), ("process_start_ns", 63), ("cuda_driver_version", 31)):
        v = doc.get(f)
        _want(v is None or (_is_int(v) and 0 <= v < 1 << bits), path,
              f"capture.{f} must be a non-negative {bits + 1}-bit int, got {v!r}")
    devs = doc.get("devices", {})
    _want(isinstance(devs, dict), path, "capture.devices must be an object of device index -> {uuid, name}")
    uuids: Dict[int, str] = {}
    names: Dict[int, str] = {}
    for k, d in devs.items():
        _want(k.isascii() and k.isdigit() and int(k) < 1 << 32 and isinstance(d, dict)
              and set(d) <= {"uuid", "name"} and all(isinstance(x, str) for x in d.values()), path,
              f"capture.devices: bad entry {k!r}: {d!r} (expected a device index -> {{uuid, name}} strings)")
        if "uuid" in d:
            uuids[int(k)] = d["uuid"]
        if "name" in d:
            names[int(k)] = d["name"]
    return CaptureIdentity(host=doc.get("host"), pid=doc.get("pid"), process_start_ns=doc.get("process_start_ns"),
                           devices=types.MappingProxyType(uuids), device_names=types.MappingProxyType(names),
                           torch_version=doc.get("torch_version"), driver_version=doc.get("driver_version"),
                           cuda_driver_version=doc.get("cuda_driver_version"))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _want(cond: bool, path: str, problem: str) -> None:
    if not cond:
        raise SidecarError(path, problem)


def _dim3(v: Any, path: str, where: str) -> Optional[Tuple[int, int, int]]:
    if v is None:
        return None
    _want(isinstance(v, list) and len(v) == 3 and all(_is_int(x) and 0 <= x < 1 << 32 for x in v), path,
          f"{where}: expected a list of 3 unsigned 32-bit ints, got {v!r}")
    return (v[0], v[1], v[2])


#: Deepest list/dict nesting of an annotation value (the binary form's decoder allows ~100
#: message levels and each value level costs three).
MAX_VALUE_DEPTH = 16


def check_annotation_value(v: Any, path: str, where: str, depth: int = 0) -> None:
    """Schema check of an annotation value read from a file: what the binary form can hold."""
    _want(depth <= MAX_VALUE_DEPTH, path, f"{where}: nested deeper than {MAX_VALUE_DEPTH} levels")
    if v is None or isinstance(v, (bool, str)):
        return
    if isinstance(v, int):
        _want(_INT64[0] <= v <= _INT64[1], path, f"{where}: int {v} does not fit in 64 bits")
    elif isinstance(v, float):
        _want(math.isfinite(v), path, f"{where}: {v} is not a finite number")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            check_annotation_value(x, path, f"{where}[{i}]", depth + 1)
    elif isinstance(v, dict):
        for k, x in v.items():
            _want(isinstance(k, str), path, f"{where}: key {k!r} is not a string")
            check_annotation_value(x, path, f"{where}.{k}", depth + 1)
    else:
        _want(False, path, f"{where}: value of type {type(v).__name__} is not allowed")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_bytes(data: bytes, path: str) -> Any:
    """Strict JSON (no NaN/Infinity); every failure, deep nesting included, is a SidecarError."""
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as e:
        raise SidecarError(path, f"not valid JSON (truncated or corrupt?): {e}") from None
    except RecursionError:
        raise SidecarError(path, "not valid JSON: nested too deeply") from None


def _json_lanes(lanes_in: Any, path: str, where: str) -> Dict[int, str]:
    """``{"60": "label"}`` -> ``{60: "label"}``, checked (32-bit ids, string labels)."""
    _want(isinstance(lanes_in, dict), path, f"'{where}' must be an object of lane id -> label")
    lanes = {}
    for k, v in lanes_in.items():
        _want(k.isascii() and k.isdigit() and int(k) < 1 << 32 and isinstance(v, str), path,
              f"{where}: bad entry {k!r}: {v!r} (expected a 32-bit lane id -> label)")
        lanes[int(k)] = v
    return lanes


def from_json(doc: Any, path: str) -> AnnotationSet:
    _want(isinstance(doc, dict), path, "JSON sidecar must be an object")
    if "format" not in doc:
        hint = " (it looks like a profiler trace: pass it as TRACE, not as annotations)" if "traceEvents" in doc else ""
        raise SidecarError(path, f'not an annotation sidecar{hint}: a JSON sidecar has "format": "{MAGIC}", '
                                 'a capture record has "exec_cupti_graph_id" and "nodes"; this JSON has '
                                 f"neither (keys: {', '.join(sorted(map(str, doc))[:8]) or 'none'})")
    _want(doc.get("format") == MAGIC, path, f"not an annotation sidecar (format {doc.get('format')!r}, "
                                            f"expected {MAGIC!r})")
    ver = doc.get("version")
    _want(_is_int(ver), path, f"'version' must be an int, got {ver!r}")
    _want(ver in READABLE_VERSIONS, path, f"sidecar version {ver} is not supported (this reader knows "
                                          f"{_known_versions()}); upgrade perfetto_graph_ann")
    backend = doc.get("backend")
    _want(backend is None or isinstance(backend, str), path, f"'backend' must be a string, got {backend!r}")
    lanes = _json_lanes(doc.get("lanes", {}), path, "lanes")
    graphs_in = doc.get("graphs")
    _want(isinstance(graphs_in, list), path, "'graphs' must be a list")
    graphs = []
    for gi, g in enumerate(graphs_in):
        _want(isinstance(g, dict), path, f"graph {gi}: must be an object")
        ex = g.get("exec_id")
        _want(_is_int(ex) and 0 <= ex < 1 << 32, path, f"graph {gi}: 'exec_id' must be a 32-bit int, got {ex!r}")
        tid, dev = g.get("template_id"), g.get("device")
        _want(tid is None or (_is_int(tid) and 0 <= tid < 1 << 32), path, f"graph {gi}: 'template_id' must be a 32-bit int")
        _want(dev is None or (_is_int(dev) and -(1 << 31) <= dev < 1 << 31), path, f"graph {gi}: 'device' must be a 32-bit int")
        nodes_in = g.get("nodes")
        _want(isinstance(nodes_in, list), path, f"graph {gi}: 'nodes' must be a list")
        nodes = []
        for ni, n in enumerate(nodes_in):
            where = f"graph {gi} node {ni}"
            _want(isinstance(n, dict), path, f"{where}: must be an object")
            key = n.get("key")
            _want(_is_int(key) and key >> 32 == ex and key >= 0, path, f"{where}: 'key' must be an int of graph {ex}, got {key!r}")
            t = n.get("type", "kernel")
            _want(t in NODE_TYPES, path, f"{where}: unknown node type {t!r}")
            kernel = n.get("kernel")
            _want(kernel is None or isinstance(kernel, str), path, f"{where}: 'kernel' must be a string")
            ann = n.get("annotation", {})
            _want(isinstance(ann, dict), path, f"{where}: 'annotation' must be an object")
            check_annotation_value(ann, path, f"{where} annotation")
            cal = n.get("calibration")
            stream = ordinal = None
            if cal is not None:
                _want(isinstance(cal, dict) and _is_int(cal.get("stream")) and _is_int(cal.get("ordinal"))
                      and 0 <= cal["stream"] < 1 << 64 and 0 <= cal["ordinal"] < 1 << 32, path,
                      f"{where}: 'calibration' must be {{stream: uint64, ordinal: uint32}}")
                stream, ordinal = cal["stream"], cal["ordinal"]
            nscopes = n.get("scopes", [])
            _want(isinstance(nscopes, list) and all(_is_int(x) and 0 <= x < 1 << 32 for x in nscopes), path,
                  f"{where}: 'scopes' must be a list of scope ids")
            nodes.append(NodeRecord(key=key, type=t, kernel=kernel, grid=_dim3(n.get("grid"), path, f"{where} grid"),
                                    block=_dim3(n.get("block"), path, f"{where} block"), annotation=ann,
                                    stream=stream, ordinal=ordinal, scopes=tuple(nscopes)))
        glanes = g.get("lanes")
        glanes = None if glanes is None else types.MappingProxyType(_json_lanes(glanes, path, f"graph {gi} lanes"))
        gname, note = g.get("name"), g.get("calibration_note")
        _want(gname is None or isinstance(gname, str), path, f"graph {gi}: 'name' must be a string, got {gname!r}")
        _want(note is None or isinstance(note, str), path, f"graph {gi}: 'calibration_note' must be a string, got {note!r}")
        scopes = _json_scopes(g["scopes"], path, f"graph {gi}") if g.get("scopes") is not None else None
        _check_scopes(scopes, nodes, path, f"graph {gi}")
        graphs.append(GraphRecord(ex, tuple(nodes), g.get("template_id"), g.get("device"), glanes, gname, note, scopes))
    capture = _identity_from_json(doc["capture"], path) if doc.get("capture") is not None else None
    return AnnotationSet(tuple(graphs), types.MappingProxyType(lanes), backend, path, capture)


# ---- public API ----------------------------------------------------------------------

def save_annotations(path: PathLike, annotations: Optional[AnnotationSet] = None, format: Optional[str] = None) -> str:
    """Write the annotations recorded so far (or ``annotations``) to ``path``, atomically.

    ``format``: ``"binary"`` or ``"json"``; default from the name (``.json`` / ``.json.gz``
    in any case is JSON, as everywhere else in the package; anything else binary). A ``.gz`` suffix gzips. Returns the path.
    """
    path = os.fspath(path)
    if annotations is None:
        annotations = recorded_annotations()
    fmt = format or ("json" if formats.is_json_name(path) else "binary")
    if fmt == "json":
        data = json.dumps(to_json(annotations), indent=1, ensure_ascii=False).encode() + b"\n"
    elif fmt == "binary":
        data = to_bytes(annotations)
    else:
        raise ValueError(f"format must be 'binary' or 'json', got {format!r}")
    atomic_write_bytes(path, data)
    return path


def recorded_annotations() -> AnnotationSet:
    """Everything captured so far in this process: our registry, or torch's own on torch's backend."""
    from . import backends
    from .registry import REGISTRY

    if backends.selected_name() == backends.TORCH:  # torch's own registry: keys and fields only
        from . import torch_native

        ann = torch_native.call("get_kernel_annotations")
        by_graph: Dict[int, List[NodeRecord]] = {}
        for key, vals in dict(ann).items():
            merged: Dict[str, Any] = {}
            for v in vals:
                merged.update(v)
            by_graph.setdefault(key >> 32, []).append(NodeRecord(key=key, annotation=merged))
        graphs = tuple(GraphRecord(g, tuple(sorted(ns, key=lambda n: n.key))) for g, ns in sorted(by_graph.items()))
        from .identity import capture_identity

        return AnnotationSet(graphs, types.MappingProxyType(REGISTRY.lanes.snapshot()), backends.TORCH,
                             capture=capture_identity())
    return REGISTRY.snapshot()


def load_annotations(path: PathLike) -> AnnotationSet:
    """Read a binary sidecar, a JSON sidecar, or a fixture capture record (``*.capture.json``)."""
    path = os.fspath(path)
    data = formats.strip_bom(formats.read_bytes(path, SidecarError))
    if not data.strip():
        raise SidecarError(path, "empty file")
    form = formats.annotation_form(data)
    if form == "json":
        doc = parse_json_bytes(data, path)
        if formats.is_capture_record(doc):
            from .capture_record import capture_record_to_annotations

            return capture_record_to_annotations(doc, path)
        return from_json(doc, path)
    if form is None:
        raise SidecarError(path, "not an annotation sidecar (neither the binary form nor JSON)")
    return from_bytes(data, path)


def load_annotation_files(paths: Iterable[PathLike]) -> AnnotationSet:
    """The annotations of several files (sidecars or capture records), merged in the given
    order (:meth:`AnnotationSet.merge`); an empty set for no files.

    A graph recorded identically in two files (one file passed twice, a copy, its sidecar
    next to its capture record) is kept once: as two graphs every match would tie with its
    own duplicate and be flagged ambiguous. Graphs that differ in anything stay apart.
    """
    return merge_annotation_sets([load_annotations(p) for p in paths])


def merge_annotation_sets(sets: Iterable[AnnotationSet]) -> AnnotationSet:
    """:meth:`AnnotationSet.merge`, keeping a graph recorded identically in several sets once
    (see :func:`load_annotation_files`); an empty set for no sets."""
    sets = list(sets)
    if not sets:
        return AnnotationSet()
    merged = AnnotationSet.merge(sets)
    graphs: list = []
    for g in merged.graphs:
        if g not in graphs:
            graphs.append(g)
    if len(graphs) == len(merged.graphs):
        return merged
    return dataclasses.replace(merged, graphs=tuple(graphs))
