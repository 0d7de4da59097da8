"""The sidecar's JSON form, for humans: the same content as the binary form, as an object
``{"format": MAGIC, "version", "producer", "backend", "capture"?, "lanes", "replays"?, "graphs"}``.
"""
from __future__ import annotations

import math
import types
from typing import Any, Dict, Mapping, Tuple

from ..errors import SidecarError
from .model import NODE_TYPES, AnnotationSet, CaptureIdentity, GraphRecord, NodeRecord, ReplayWindow, ScopeInstance
from .schema import (INT64, MAGIC, READABLE_VERSIONS, VERSION, check_annotation_value, check_scopes, dim3, edges,
                     is_int, known_versions, producer, replay_thread, replay_window, want)

__all__ = ["from_json", "to_json"]


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
        if g.edges is not None:  # [src, dst] pairs; [src, dst, type, from_port] where not a plain dependency
            gd["edges"] = [[e.src, e.dst] if not (e.type or e.from_port) else list(e) for e in g.edges]
        gd["nodes"] = nodes
        graphs.append(gd)
    doc: Dict[str, Any] = {"format": MAGIC, "version": VERSION, "producer": producer(), "backend": s.backend}
    if s.capture is not None:
        doc["capture"] = _identity_to_json(s.capture)
    doc["lanes"] = {str(k): v for k, v in sorted(s.lanes.items())}
    if s.replays is not None:
        doc["replays"] = [_window_json(w) for w in s.replays]
    doc["graphs"] = graphs
    return doc


def _window_json(w: ReplayWindow) -> Dict[str, Any]:
    """``{"pid", "start_ns", "stop_ns", "threads": [{"ident", "native_id", "graphs", "head_uncertain",
    "tail_uncertain", "starts_ns"}]}`` (times: Unix ns)."""
    return {"pid": w.pid, "start_ns": w.start_ns, "stop_ns": w.stop_ns,
            "threads": [{"ident": t.ident, "native_id": t.native_id, "graphs": list(t.graphs),
                         "head_uncertain": t.head_uncertain, "tail_uncertain": t.tail_uncertain,
                         "starts_ns": list(t.starts_ns)} for t in w.threads]}


def _windows_from_json(v: Any, path: str) -> Tuple[ReplayWindow, ...]:
    want(isinstance(v, list), path, "'replays' must be a list of profiler windows")
    out = []
    for wi, w in enumerate(v):
        where = f"replay window {wi}"
        want(isinstance(w, dict) and isinstance(w.get("threads", []), list), path,
             f"{where}: must be an object with a list of 'threads'")
        threads = []
        for ti, t in enumerate(w.get("threads", [])):
            tw = f"{where} thread {ti}"
            want(isinstance(t, dict), path, f"{tw}: must be an object")
            threads.append(replay_thread(t.get("ident"), t.get("native_id"), t.get("graphs"),
                                         t.get("head_uncertain", 0), t.get("tail_uncertain", 0),
                                         t.get("starts_ns", []), path, tw))
        out.append(replay_window(w.get("pid"), w.get("start_ns"), w.get("stop_ns"), tuple(threads), path, where))
    return tuple(out)


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
    want(isinstance(doc, dict), path, "'capture' must be an object")
    for f in ("host", "torch_version", "driver_version"):
        want(doc.get(f) is None or isinstance(doc[f], str), path, f"capture.{f} must be a string, got {doc.get(f)!r}")
    for f, bits in (("pid", 63), ("process_start_ns", 63), ("cuda_driver_version", 31)):
        v = doc.get(f)
        want(v is None or (is_int(v) and 0 <= v < 1 << bits), path,
              f"capture.{f} must be a non-negative {bits + 1}-bit int, got {v!r}")
    devs = doc.get("devices", {})
    want(isinstance(devs, dict), path, "capture.devices must be an object of device index -> {uuid, name}")
    uuids: Dict[int, str] = {}
    names: Dict[int, str] = {}
    for k, d in devs.items():
        want(k.isascii() and k.isdigit() and int(k) < 1 << 32 and isinstance(d, dict)
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


def _scope_json(sc: ScopeInstance, exec_id: int) -> Dict[str, Any]:
    d: Dict[str, Any] = {"id": sc.id, "fields": _json_value(sc.fields, f"graph {exec_id} scope {sc.id} fields")}
    if sc.parent is not None:
        d["parent"] = sc.parent
    return d


def _json_scopes(raw: Any, path: str, where: str) -> Tuple[ScopeInstance, ...]:
    """A graph's ``scopes`` list: ``[{"id", "fields", "parent"?}]``."""
    want(isinstance(raw, list), path, f"{where}: 'scopes' must be a list")
    out = []
    for k, sc in enumerate(raw):
        w = f"{where} scope {k}"
        want(isinstance(sc, dict) and set(sc) <= {"id", "fields", "parent"}, path,
              f"{w}: must be an object with 'id', 'fields' and optionally 'parent'")
        sid, fields, parent = sc.get("id"), sc.get("fields", {}), sc.get("parent")
        want(is_int(sid) and 0 <= sid < 1 << 32, path, f"{w}: 'id' must be a 32-bit int, got {sid!r}")
        want(isinstance(fields, dict), path, f"{w}: 'fields' must be an object")
        check_annotation_value(fields, path, f"{w} fields")
        want(parent is None or (is_int(parent) and 0 <= parent < 1 << 32), path,
              f"{w}: 'parent' must be a scope id or absent, got {parent!r}")
        out.append(ScopeInstance(sid, types.MappingProxyType(dict(fields)), parent))
    return tuple(out)


def _json_edges(raw: Any, nodes: list, version: int, path: str, where: str) -> tuple:
    """A graph's ``edges``: ``[[src, dst], ...]``, an edge that is not a plain dependency as
    ``[src, dst, type, from_port]``."""
    want(isinstance(raw, list) and all(isinstance(e, list) and len(e) in (2, 4) for e in raw), path,
         f"{where}: 'edges' must be a list of [src, dst] (or [src, dst, type, from_port]) node local ids")
    full = any(len(e) == 4 for e in raw)
    return edges([e[0] for e in raw], [e[1] for e in raw], [e[2] if len(e) == 4 else 0 for e in raw] if full else [],
                 [e[3] if len(e) == 4 else 0 for e in raw] if full else [], nodes, version, path, where)


def _json_lanes(lanes_in: Any, path: str, where: str) -> Dict[int, str]:
    """``{"60": "label"}`` -> ``{60: "label"}``, checked (32-bit ids, string labels)."""
    want(isinstance(lanes_in, dict), path, f"'{where}' must be an object of lane id -> label")
    lanes = {}
    for k, v in lanes_in.items():
        want(k.isascii() and k.isdigit() and int(k) < 1 << 32 and isinstance(v, str), path,
              f"{where}: bad entry {k!r}: {v!r} (expected a 32-bit lane id -> label)")
        lanes[int(k)] = v
    return lanes


_NODE_TYPES = frozenset(NODE_TYPES)
_U32 = 1 << 32


def _plain_value(v: Any) -> bool:
    """``v`` None, a bool, a str, an int64 or a finite float: what :func:`check_annotation_value`
    accepts at once, tested without making its error texts."""
    t = type(v)
    return (v is None or t is str or t is bool or (t is int and INT64[0] <= v <= INT64[1])
            or (t is float and math.isfinite(v)))


def _u32s(v: Any) -> bool:
    return isinstance(v, list) and all(is_int(x) and 0 <= x < _U32 for x in v)


def _json_node(n: Any, ex: int, path: str, gi: int, ni: int) -> NodeRecord:
    """Node ``ni`` of graph ``gi`` (exec id ``ex``), every field checked. A graph has thousands:
    an error's text is made only when it is raised (a ``SidecarError`` naming the node and its
    first wrong field)."""
    def bad(problem: str) -> SidecarError:
        return SidecarError(path, f"graph {gi} node {ni}{problem}")

    if not isinstance(n, dict):
        raise bad(": must be an object")
    key = n.get("key")
    if not (is_int(key) and key >> 32 == ex and key >= 0):
        raise bad(f": 'key' must be an int of graph {ex}, got {key!r}")
    t = n.get("type", "kernel")
    if not (isinstance(t, str) and t in _NODE_TYPES):
        raise bad(f": unknown node type {t!r}")
    kernel = n.get("kernel")
    if not (kernel is None or isinstance(kernel, str)):
        raise bad(": 'kernel' must be a string")
    ann = n.get("annotation", {})
    if not isinstance(ann, dict):
        raise bad(": 'annotation' must be an object")
    if not all(type(k) is str and _plain_value(v) for k, v in ann.items()):  # nested or wrong: the full check
        check_annotation_value(ann, path, f"graph {gi} node {ni} annotation")
    cal = n.get("calibration")
    stream = ordinal = None
    if cal is not None:
        if not (isinstance(cal, dict) and is_int(cal.get("stream")) and is_int(cal.get("ordinal"))
                and 0 <= cal["stream"] < 1 << 64 and 0 <= cal["ordinal"] < _U32):
            raise bad(": 'calibration' must be {stream: uint64, ordinal: uint32}")
        stream, ordinal = cal["stream"], cal["ordinal"]
    nscopes = n.get("scopes", [])
    if not _u32s(nscopes):
        raise bad(": 'scopes' must be a list of scope ids")
    grid, block = n.get("grid"), n.get("block")
    if not (grid is None or (_u32s(grid) and len(grid) == 3)):
        dim3(grid, path, f"graph {gi} node {ni} grid")  # raises, naming the field
    if not (block is None or (_u32s(block) and len(block) == 3)):
        dim3(block, path, f"graph {gi} node {ni} block")
    return NodeRecord(key=key, type=t, kernel=kernel, grid=None if grid is None else (grid[0], grid[1], grid[2]),
                      block=None if block is None else (block[0], block[1], block[2]), annotation=ann,
                      stream=stream, ordinal=ordinal, scopes=tuple(nscopes))


def from_json(doc: Any, path: str) -> AnnotationSet:
    want(isinstance(doc, dict), path, "JSON sidecar must be an object")
    if "format" not in doc:
        hint = " (it looks like a profiler trace: pass it as TRACE, not as annotations)" if "traceEvents" in doc else ""
        raise SidecarError(path, f'not an annotation sidecar{hint}: a JSON sidecar has "format": "{MAGIC}", '
                                 'a capture record has "exec_cupti_graph_id" and "nodes"; this JSON has '
                                 f"neither (keys: {', '.join(sorted(map(str, doc))[:8]) or 'none'})")
    want(doc.get("format") == MAGIC, path, f"not an annotation sidecar (format {doc.get('format')!r}, "
                                            f"expected {MAGIC!r})")
    ver = doc.get("version")
    want(is_int(ver), path, f"'version' must be an int, got {ver!r}")
    want(ver in READABLE_VERSIONS, path, f"sidecar version {ver} is not supported (this reader knows "
                                          f"{known_versions()}); upgrade perfetto_graph_ann")
    backend = doc.get("backend")
    want(backend is None or isinstance(backend, str), path, f"'backend' must be a string, got {backend!r}")
    lanes = _json_lanes(doc.get("lanes", {}), path, "lanes")
    graphs_in = doc.get("graphs")
    want(isinstance(graphs_in, list), path, "'graphs' must be a list")
    graphs = []
    for gi, g in enumerate(graphs_in):
        want(isinstance(g, dict), path, f"graph {gi}: must be an object")
        ex = g.get("exec_id")
        want(is_int(ex) and 0 <= ex < 1 << 32, path, f"graph {gi}: 'exec_id' must be a 32-bit int, got {ex!r}")
        tid, dev = g.get("template_id"), g.get("device")
        want(tid is None or (is_int(tid) and 0 <= tid < 1 << 32), path, f"graph {gi}: 'template_id' must be a 32-bit int")
        want(dev is None or (is_int(dev) and -(1 << 31) <= dev < 1 << 31), path, f"graph {gi}: 'device' must be a 32-bit int")
        nodes_in = g.get("nodes")
        want(isinstance(nodes_in, list), path, f"graph {gi}: 'nodes' must be a list")
        nodes = []
        for ni, n in enumerate(nodes_in):
            nodes.append(_json_node(n, ex, path, gi, ni))
        glanes = g.get("lanes")
        glanes = None if glanes is None else types.MappingProxyType(_json_lanes(glanes, path, f"graph {gi} lanes"))
        gname, note = g.get("name"), g.get("calibration_note")
        want(gname is None or isinstance(gname, str), path, f"graph {gi}: 'name' must be a string, got {gname!r}")
        want(note is None or isinstance(note, str), path, f"graph {gi}: 'calibration_note' must be a string, got {note!r}")
        scopes = _json_scopes(g["scopes"], path, f"graph {gi}") if g.get("scopes") is not None else None
        check_scopes(scopes, nodes, path, f"graph {gi}")
        gedges = _json_edges(g["edges"], nodes, ver, path, f"graph {gi}") if g.get("edges") is not None else None
        graphs.append(GraphRecord(ex, tuple(nodes), g.get("template_id"), g.get("device"), glanes, gname, note, scopes,
                                  gedges))
    capture = _identity_from_json(doc["capture"], path) if doc.get("capture") is not None else None
    replays = _windows_from_json(doc["replays"], path) if doc.get("replays") is not None else None
    return AnnotationSet(tuple(graphs), types.MappingProxyType(lanes), backend, path, capture, replays)
