"""Reader for the probe's capture records (``*.capture.json``), the fixtures' annotation format.

Format (``shared/fixtures/h200/README.md``): ``exec_cupti_graph_id``; ``nodes[]`` with
``handle``, ``type`` (``cudaGraphNodeTypeKernel`` ...), ``cupti_node_id`` (template key),
``kernel`` / ``grid`` / ``block`` for kernels, ``scope`` and ``lane`` of the innermost
scope; ``scopes[]`` (``name``, ``lane``, node ``handle``s, in closing order);
``calibration``: exec key (decimal string) -> ``stream``, ``ordinal``, ``kernel``.

Mapping to :class:`~perfetto_graph_ann.annotations.model.AnnotationSet`:
node key = ``(exec_cupti_graph_id << 32) | (cupti_node_id & 0xFFFFFFFF)`` (the template
key's local index moved onto the executable graph); annotation = ``{"name": scope,
"stream": lane}`` merged over every enclosing scope (inner wins per key); scope instances
(``GraphRecord.scopes``) and their nesting from the member lists; string lanes are
``mark_stream`` labels of this record's graph (``GraphRecord.lanes``) and get lane ids from
60 upward in order of first appearance.
"""
from __future__ import annotations

import os
import types
from typing import Any, Dict, List, Optional, Tuple

from .. import formats
from ..errors import PathLike, SidecarError
from .model import FIRST_LOGICAL_LANE, AnnotationSet, GraphRecord, NodeRecord, node_type_name, rekey
from .schema import dim3, parse_json_bytes
from .scope_instances import from_members

__all__ = ["capture_record_to_annotations", "read_capture_record"]


def _int(path: str, where: str, value: Any, bits: int = 64) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << bits:
        raise SidecarError(path, f"{where}: expected an unsigned {bits}-bit integer, got {value!r}")
    return value


def _is_handle(value: Any) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def _load_json(path: str) -> Any:
    return parse_json_bytes(formats.read_bytes(path, SidecarError), path)


def read_capture_record(path: PathLike) -> AnnotationSet:
    """Read a probe capture record into an :class:`AnnotationSet` (one graph).

    Raises :class:`SidecarError` (message starts with the path) for unreadable files,
    invalid JSON and missing or mistyped fields.
    """
    spath = os.fspath(path)
    return capture_record_to_annotations(_load_json(spath), spath)


def capture_record_to_annotations(doc: Any, path: Optional[str] = None) -> AnnotationSet:
    """Build the :class:`AnnotationSet` from an already parsed capture record.

    Args:
        doc: the parsed JSON document.
        path: the file it came from, named in errors (default ``<capture record>``).

    Returns:
        One graph (the record's executable graph) with its nodes, lanes and scopes.

    Raises:
        SidecarError: a document that is no capture record, or a field of the wrong type or
            range, naming the file and the field.
    """
    spath = path or "<capture record>"
    exec_id, nodes, scopes, calibration = _top_level(doc, spath)
    lanes = _Lanes(spath, nodes, scopes)
    for i, n in enumerate(nodes):  # lane ids in order of first appearance: nodes first (capture order)
        if not isinstance(n, dict):
            raise SidecarError(spath, f"nodes[{i}]: expected an object")
        lanes.id(f"nodes[{i}].lane", n.get("lane"))
    scope_fields = _scope_fields(scopes, lanes, spath)
    calib = _calibration(calibration, spath)
    # Scope instances and their nesting from the member lists (scopes[] is in closing order).
    order = [n.get("handle") for n in nodes]
    instances, node_scopes = from_members(scope_fields, [h for h in order if h is not None])
    records: List[NodeRecord] = []
    seen: set = set()
    for i, n in enumerate(nodes):
        records.append(_node_record(i, n, exec_id, scope_fields, node_scopes, calib, lanes, seen, spath))
    unknown = sorted(set(calib) - seen)
    if unknown:
        raise SidecarError(spath, f"calibration names node key {unknown[0]} that is not among the nodes")
    labels = types.MappingProxyType(dict(sorted(lanes.labels.items())))
    # One graph per record: its mark_stream labels are the graph's own (and the set's union).
    graph = GraphRecord(exec_id=exec_id, nodes=tuple(records), lanes=labels, scopes=instances)
    return AnnotationSet(graphs=(graph,), lanes=labels, backend="cupti", source=spath)


def _top_level(doc: Any, spath: str) -> Tuple[int, List[Any], List[Any], Dict[str, Any]]:
    """Phase 1: the record's executable graph id, nodes, scopes and calibration, checked."""
    if not formats.is_capture_record(doc) or "nodes" not in doc:
        raise SidecarError(spath, "not a capture record: needs 'exec_cupti_graph_id' and 'nodes'")
    exec_id = _int(spath, "exec_cupti_graph_id", doc["exec_cupti_graph_id"], 32)
    nodes = doc["nodes"]
    scopes = doc.get("scopes") or []
    calibration = doc.get("calibration") or {}
    if not isinstance(nodes, list):
        raise SidecarError(spath, "'nodes' must be a list")
    if not isinstance(scopes, list):
        raise SidecarError(spath, "'scopes' must be a list")
    if not isinstance(calibration, dict):
        raise SidecarError(spath, "'calibration' must be an object keyed by node key")
    return exec_id, nodes, scopes, calibration


class _Lanes:
    """The record's lanes: integer lanes as given, labels numbered from
    ``FIRST_LOGICAL_LANE`` in order of first appearance, never onto a user's integer lane."""

    def __init__(self, spath: str, nodes: List[Any], scopes: List[Any]) -> None:
        self.spath = spath
        self.labels: Dict[int, str] = {}
        self.by_label: Dict[str, int] = {}
        self.taken_by_user = {x.get("lane") for x in list(nodes) + list(scopes)
                              if isinstance(x, dict) and isinstance(x.get("lane"), int)
                              and not isinstance(x.get("lane"), bool)}

    def id(self, where: str, raw: Any) -> Optional[int]:
        if raw is None:
            return None
        if isinstance(raw, bool):
            raise SidecarError(self.spath, f"{where}: lane must be an integer, a label or null, got {raw!r}")
        if isinstance(raw, int):
            if not 0 <= raw < 1 << 32:
                raise SidecarError(self.spath, f"{where}: lane {raw} is not a 32-bit lane id")
            return raw
        if isinstance(raw, str):
            if raw not in self.by_label:
                taken = set(self.labels) | self.taken_by_user
                nxt = FIRST_LOGICAL_LANE
                while nxt in taken:
                    nxt += 1
                self.by_label[raw] = nxt
                self.labels[nxt] = raw
            return self.by_label[raw]
        raise SidecarError(self.spath, f"{where}: lane must be an integer, a label or null, got {raw!r}")


def _scope_fields(scopes: List[Any], lanes: _Lanes, spath: str) -> List[Tuple[Dict[str, Any], frozenset]]:
    """Phase 2: each scope's fields (name, lane as ``stream``) and member node handles."""
    out: List[Tuple[Dict[str, Any], frozenset]] = []
    for i, s in enumerate(scopes):
        if not isinstance(s, dict) or not isinstance(s.get("nodes", []), list):
            raise SidecarError(spath, f"scopes[{i}]: expected an object with a 'nodes' list")
        fields: Dict[str, Any] = {}
        if s.get("name") is not None:
            fields["name"] = str(s["name"])
        lane = lanes.id(f"scopes[{i}].lane", s.get("lane"))
        if lane is not None:
            fields["stream"] = lane
        members = s.get("nodes", [])
        if not all(_is_handle(h) for h in members):
            raise SidecarError(spath, f"scopes[{i}].nodes: expected a list of node handles (integers)")
        out.append((fields, frozenset(members)))
    return out


def _calibration(calibration: Dict[str, Any], spath: str) -> Dict[int, Tuple[int, int]]:
    """Phase 3: node key -> (stream, ordinal) of the record's calibration."""
    calib: Dict[int, Tuple[int, int]] = {}
    for k, v in calibration.items():
        try:
            key = int(k)
        except (TypeError, ValueError):
            raise SidecarError(spath, f"calibration key {k!r} is not a decimal node key") from None
        if not isinstance(v, dict):
            raise SidecarError(spath, f"calibration[{k}]: expected an object")
        calib[key] = (_int(spath, f"calibration[{k}].stream", v.get("stream")),
                      _int(spath, f"calibration[{k}].ordinal", v.get("ordinal"), 32))
    return calib


def _node_record(i: int, n: Dict[str, Any], exec_id: int, scope_fields: List[Tuple[Dict[str, Any], frozenset]],
                 node_scopes: Dict[Any, Any], calib: Dict[int, Tuple[int, int]], lanes: _Lanes, seen: set,
                 spath: str) -> NodeRecord:
    """Phase 4: node ``i``'s record, its annotation merged from its enclosing scopes."""
    cupti_id = _int(spath, f"nodes[{i}].cupti_node_id", n.get("cupti_node_id"))
    key = rekey(exec_id, cupti_id)
    if key in seen:
        raise SidecarError(spath, f"nodes[{i}]: duplicate node key {key}")
    seen.add(key)
    kernel = n.get("kernel")
    if kernel is not None and not isinstance(kernel, str):
        raise SidecarError(spath, f"nodes[{i}].kernel: expected a string, got {kernel!r}")
    # Merge enclosing scopes: scopes close inner-first, so apply them outer-first.
    annotation: Dict[str, Any] = {}
    handle = n.get("handle")
    if handle is not None and not _is_handle(handle):
        raise SidecarError(spath, f"nodes[{i}].handle: expected an integer, got {handle!r}")
    for fields, members in reversed(scope_fields):
        if handle in members:
            annotation.update(fields)
    if n.get("scope") is not None:  # the innermost scope, as the node itself records it
        annotation["name"] = str(n["scope"])
        own_lane = lanes.id(f"nodes[{i}].lane", n.get("lane"))
        if own_lane is not None:
            annotation["stream"] = own_lane
    stream, ordinal = calib.get(key, (None, None))
    return NodeRecord(
        key=key,
        type=node_type_name(str(n.get("type") or "")),
        kernel=kernel,
        grid=dim3(n.get("grid"), spath, f"nodes[{i}].grid"),
        block=dim3(n.get("block"), spath, f"nodes[{i}].block"),
        annotation=types.MappingProxyType(annotation),
        stream=stream,
        ordinal=ordinal,
        scopes=node_scopes.get(handle, ()) if handle is not None else (),
    )
