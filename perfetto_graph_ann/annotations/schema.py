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
from ..errors import SidecarError
from .model import NodeRecord, ScopeInstance

#: The sidecar's magic string: the binary form's field 1 and the JSON form's ``"format"``.
MAGIC = formats.SIDECAR_MAGIC
#: Version written. 2 added the capture identity, graph names and calibration notes.
VERSION = 2
#: Versions read (a version-1 file simply has none of version 2's fields).
READABLE_VERSIONS = (1, 2)
#: Range of an annotation int (the binary form stores int64).
INT64 = (-(1 << 63), (1 << 63) - 1)


def producer() -> str:
    """The ``producer`` a written sidecar names: this package and its version."""
    from .. import __version__

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
    if scopes is None:
        for n in nodes:
            want(not n.scopes, path, f"{where}: node {n.key} lists scopes but the graph has no scope table")
        return
    ids = {sc.id: sc for sc in scopes}
    want(len(ids) == len(scopes), path, f"{where}: two scopes share an id")
    for sc in scopes:
        seen = {sc.id}
        p = sc.parent
        while p is not None:
            want(p in ids, path, f"{where}: scope {sc.id} has an unknown parent {p}")
            want(p not in seen, path, f"{where}: scope {sc.id}'s parents form a cycle")
            seen.add(p)
            p = ids[p].parent
    for n in nodes:
        for s in n.scopes:
            want(s in ids, path, f"{where}: node {n.key} refers to unknown scope {s}")


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
