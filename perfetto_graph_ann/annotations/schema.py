"""The sidecar format's constants and the schema checks its readers share.

The binary (:mod:`.sidecar_proto`) and JSON (:mod:`.sidecar_json`) forms and the capture
records (:mod:`.capture_record`) all check fields with these helpers, so a problem reads the
same whichever form it is found in: a :class:`~perfetto_graph_ann.errors.SidecarError`
whose message starts with the path.
"""
from __future__ import annotations

import json
import math
from typing import Any, List, Optional, Tuple

from .. import formats
from .._version import __version__
from ..errors import SidecarError
from .model import GraphEdge, NodeRecord, ReplayThread, ReplayWindow, ScopeInstance

__all__ = ["check_annotation_value", "check_scopes", "dim3", "INT64", "is_int", "known_versions", "MAGIC",
           "MAX_VALUE_DEPTH", "parse_json_bytes", "producer", "READABLE_VERSIONS", "replay_thread", "replay_window",
           "VERSION", "want"]

#: The sidecar's magic string: the binary form's field 1 and the JSON form's ``"format"``.
MAGIC = formats.SIDECAR_MAGIC
#: Version written. 2 added the capture identity, graph names and calibration notes; 3 the
#: replay record (which graph each profiled replay launched); 4 the graphs' dependency edges.
VERSION = 4
#: Versions read (an older file simply has none of the newer versions' fields).
READABLE_VERSIONS = (1, 2, 3, 4)
#: Range of an annotation int (the binary form stores int64).
INT64 = (-(1 << 63), (1 << 63) - 1)


def producer() -> str:
    """The ``producer`` a written sidecar names: this package and its version."""
    return f"perfetto_graph_ann {__version__}"


def known_versions() -> str:
    return ", ".join(map(str, READABLE_VERSIONS))


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def want(cond: bool, path: str, problem: str) -> None:
    """Raise ``SidecarError(path, problem)`` unless ``cond``."""
    if not cond:
        raise SidecarError(path, problem)


def dim3(v: Any, path: str, where: str) -> Optional[Tuple[int, int, int]]:
    """A grid / block read from JSON: None, or a list of 3 unsigned 32-bit ints."""
    if v is None:
        return None
    want(isinstance(v, list) and len(v) == 3 and all(is_int(x) and 0 <= x < 1 << 32 for x in v), path,
         f"{where}: expected a list of 3 unsigned 32-bit ints, got {v!r}")
    return (v[0], v[1], v[2])


#: Deepest list/dict nesting of an annotation value (the binary form's decoder allows ~100
#: message levels and each value level costs three).
MAX_VALUE_DEPTH = 16


def check_annotation_value(v: Any, path: str, where: str, depth: int = 0) -> None:
    """Schema check of an annotation value read from a file: what the binary form can hold."""
    want(depth <= MAX_VALUE_DEPTH, path, f"{where}: nested deeper than {MAX_VALUE_DEPTH} levels")
    if v is None or isinstance(v, (bool, str)):
        return
    if isinstance(v, int):
        want(INT64[0] <= v <= INT64[1], path, f"{where}: int {v} does not fit in 64 bits")
    elif isinstance(v, float):
        want(math.isfinite(v), path, f"{where}: {v} is not a finite number")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            check_annotation_value(x, path, f"{where}[{i}]", depth + 1)
    elif isinstance(v, dict):
        for k, x in v.items():
            want(isinstance(k, str), path, f"{where}: key {k!r} is not a string")
            check_annotation_value(x, path, f"{where}.{k}", depth + 1)
    else:
        want(False, path, f"{where}: value of type {type(v).__name__} is not allowed")


def check_scopes(scopes: Optional[Tuple[ScopeInstance, ...]], nodes: List[NodeRecord], path: str, where: str) -> None:
    """Scope ids unique, parents and node references known, no parent cycle."""
    # the loops below run a node, scope or parent at a time: each error's text is made only when it is raised
    if scopes is None:
        for n in nodes:
            if n.scopes:
                raise SidecarError(path, f"{where}: node {n.key} lists scopes but the graph has no scope table")
        return
    ids = {sc.id: sc for sc in scopes}
    want(len(ids) == len(scopes), path, f"{where}: two scopes share an id")
    for sc in scopes:
        seen = {sc.id}
        p = sc.parent
        while p is not None:
            if p not in ids:
                raise SidecarError(path, f"{where}: scope {sc.id} has an unknown parent {p}")
            if p in seen:
                raise SidecarError(path, f"{where}: scope {sc.id}'s parents form a cycle")
            seen.add(p)
            p = ids[p].parent
    for n in nodes:
        for s in n.scopes:
            if s not in ids:
                raise SidecarError(path, f"{where}: node {n.key} refers to unknown scope {s}")


def edges(src: Any, dst: Any, types: Any, ports: Any, nodes: List[NodeRecord], version: Any, path: str,
          where: str) -> Tuple[GraphEdge, ...]:
    """A graph's edges from parallel lists (``types`` / ``ports`` empty: all 0), checked: 32-bit
    local ids of the graph's recorded nodes, no self edge, a version that has edges."""
    want(version is None or version >= 4, path, f"{where}: 'edges' are a version-4 field but the file says version {version}")
    ok = all(isinstance(x, (list, tuple)) for x in (src, dst, types, ports))
    want(ok and len(src) == len(dst) and len(types) in (0, len(src)) and len(ports) in (0, len(src)), path,
         f"{where}: 'edges' must be pairs of node local ids (with the same number of types / ports, or none)")
    for lst in (src, dst, types, ports):
        want(all(is_int(x) and 0 <= x < 1 << 32 for x in lst), path,
             f"{where}: edge ends, types and ports must be unsigned 32-bit ints")
    local = {n.key & 0xFFFFFFFF for n in nodes}
    out = []
    for i, (a, b) in enumerate(zip(src, dst)):
        if a not in local or b not in local:
            raise SidecarError(path, f"{where}: edge {i} ({a} -> {b}) names a node the graph does not list")
        if a == b:
            raise SidecarError(path, f"{where}: edge {i} goes from node {a} to itself")
        out.append(GraphEdge(a, b, types[i] if types else 0, ports[i] if ports else 0))
    return tuple(out)


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


def replay_thread(ident: Any, native_id: Any, graphs: Any, head: Any, tail: Any, starts: Any, path: str,
                  where: str) -> ReplayThread:
    """A :class:`ReplayThread` from the values either form holds, checked (``starts``: Unix ns)."""
    want(is_int(ident) and 0 <= ident < 1 << 64, path, f"{where}: 'ident' must be an unsigned 64-bit int, got {ident!r}")
    want(native_id is None or (is_int(native_id) and INT64[0] <= native_id <= INT64[1]), path,
         f"{where}: 'native_id' must be a 64-bit int, got {native_id!r}")
    want(isinstance(graphs, (list, tuple)) and all(is_int(g) and 0 <= g < 1 << 32 for g in graphs), path,
         f"{where}: 'graphs' must be a list of 32-bit executable graph ids")
    n = len(graphs)
    for name, v in (("head_uncertain", head), ("tail_uncertain", tail)):
        want(is_int(v) and 0 <= v <= n, path, f"{where}: '{name}' must be an int from 0 to {n} (the calls), got {v!r}")
    want(isinstance(starts, (list, tuple)) and len(starts) in (0, n)
         and all(is_int(t) and INT64[0] <= t <= INT64[1] for t in starts), path,
         f"{where}: 'starts_ns' must be empty or one 64-bit int per call")
    return ReplayThread(ident, native_id, tuple(graphs), head, tail, tuple(starts))


def replay_window(pid: Any, start_ns: Any, stop_ns: Any, threads: Tuple[ReplayThread, ...], path: str,
                  where: str) -> ReplayWindow:
    """A :class:`ReplayWindow`, checked."""
    want(pid is None or (is_int(pid) and 0 <= pid <= INT64[1]), path, f"{where}: 'pid' must be a non-negative int, got {pid!r}")
    for name, v in (("start_ns", start_ns), ("stop_ns", stop_ns)):
        want(is_int(v) and INT64[0] <= v <= INT64[1], path, f"{where}: '{name}' must be a 64-bit int, got {v!r}")
    want(start_ns <= stop_ns, path, f"{where}: 'start_ns' {start_ns} is after 'stop_ns' {stop_ns}")
    return ReplayWindow(pid, start_ns, stop_ns, threads)
