"""Scope instances: each ``mark_kernels`` block of a capture, its own fields and its parent.

A node's merged annotation says which fields apply to it but not which blocks enclosed
it: with ``layer 3`` around ``attn``, the node carries ``{"name": "attn", "layer": 3}``
and the outer ``name`` is gone. To draw scope ranges (``layer 3`` ⊃ ``attn``) the graph
record keeps a table of instances (:attr:`GraphRecord.scopes`) and every node the ids of
the instances around it, outermost first (:attr:`NodeRecord.scopes`).

Three sources, best first:

* the live capture's scope ranges (positions in the node listing, :func:`from_ranges`);
* a capture record's ``scopes[]`` member lists (:func:`from_members`);
* neither (sidecars written before scope tables, hand-built sets): :func:`derive` makes one
  flat instance per run of consecutive nodes with the same merged annotation. That cannot
  see nesting, and two back-to-back blocks with equal fields become one instance.

Only *named* scopes are instances: a block whose fields are a ``stream`` lane alone
(``mark_stream``) is a lane, not a range. Pure Python, no torch.
"""
from __future__ import annotations

import types
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .model import ScopeInstance

__all__ = ["ScopeInstance", "LANE_FIELDS", "is_named", "scope_label", "from_ranges", "from_members", "derive",
           "graph_scopes", "path_of"]

#: fields that place a node rather than name a range
LANE_FIELDS = frozenset({"stream"})


def is_named(fields: Mapping[str, Any]) -> bool:
    """True when ``fields`` name a range (anything besides the display lane)."""
    return any(k not in LANE_FIELDS for k in fields)


def _value_text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


#: Fields of a module scope (``capture/modules.py``) that its label leaves out: its ``name`` is
#: the module path already; the class is written as the scope slice's ``module class`` arg.
MODULE_FIELDS = ("module", "module_class")


def scope_label(fields: Mapping[str, Any]) -> str:
    """Display name of a scope: its ``name`` plus its other fields.

    ``{"name": "layer", "layer": 3}`` -> ``layer 3`` (a field named like the scope shows
    its value only); ``{"name": "attn", "head": 2}`` -> ``attn head=2``; the lane field and a
    module scope's ``module`` / ``module_class`` are left out.
    """
    name = fields.get("name")
    parts: List[str] = [str(name)] if name is not None else []
    for k, v in fields.items():
        if k == "name" or k in LANE_FIELDS or k in MODULE_FIELDS:
            continue
        parts.append(_value_text(v) if k == name else f"{k}={_value_text(v)}")
    return " ".join(parts) if parts else "scope"


def _freeze(fields: Mapping[str, Any]) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(fields))


def _nest(spans: List[Tuple[int, int, int, Mapping[str, Any]]]) -> List[ScopeInstance]:
    """Instances from ``(start, end, order, fields)`` half-open ranges (non-empty, named).

    The parent is the innermost earlier range containing this one; equal ranges nest in
    ``order`` (the block opened first is the outer one).
    """
    spans.sort(key=lambda s: (s[0], -s[1], s[2]))
    out: List[ScopeInstance] = []
    stack: List[Tuple[int, int]] = []  # (end, id) of open ranges
    for start, end, _order, fields in spans:
        while stack and stack[-1][0] < end:
            stack.pop()
        iid = len(out)
        out.append(ScopeInstance(iid, _freeze(fields), stack[-1][1] if stack else None))
        stack.append((end, iid))
    return out


def from_ranges(records: Iterable[Any], listing: Sequence[int]
                ) -> Tuple[Tuple[ScopeInstance, ...], Dict[int, Tuple[int, ...]]]:
    """Instances from a capture's scope records (``seq``, ``fields``, ``start``, ``end``).

    Returns the instances (outer ones first) and node handle -> instance ids around it,
    outermost first. ``listing`` is the finished graph's node handles in creation order.
    """
    spans = [(r.start, r.end, r.seq, r.fields) for r in records if r.end > r.start and is_named(r.fields)]
    inst = _nest(spans)
    per: Dict[int, List[int]] = {}
    spans.sort(key=lambda s: (s[0], -s[1], s[2]))  # the order _nest numbered them in
    for iid, (start, end, _o, _f) in enumerate(spans):
        for h in listing[start:end]:
            per.setdefault(h, []).append(iid)
    return tuple(inst), {h: tuple(ids) for h, ids in per.items()}


def from_members(scopes: Sequence[Tuple[Mapping[str, Any], Iterable[Any]]], order: Sequence[Any]
                 ) -> Tuple[Tuple[ScopeInstance, ...], Dict[Any, Tuple[int, ...]]]:
    """Instances from member lists (a capture record's ``scopes[]``: fields, node handles).

    ``order`` lists every node handle in creation order: a scope's range is from its first
    to its last member, so nesting follows from containment. A scope listed first among
    equal ranges is the inner one (capture records list scopes in closing order).
    """
    pos = {h: i for i, h in enumerate(order)}
    spans = []
    members: List[List[int]] = []
    n = len(scopes)
    for k, (fields, hs) in enumerate(scopes):
        idx = sorted(pos[h] for h in hs if h in pos)
        if not idx or not is_named(fields):
            continue
        spans.append((idx[0], idx[-1] + 1, n - k, fields))
        members.append(idx)
    keyed = sorted(range(len(spans)), key=lambda j: (spans[j][0], -spans[j][1], spans[j][2]))
    inst = _nest(list(spans))
    per: Dict[Any, List[int]] = {}
    for iid, j in enumerate(keyed):
        for p in members[j]:
            per.setdefault(order[p], []).append(iid)
    return tuple(inst), {h: tuple(ids) for h, ids in per.items()}


def derive(nodes: Sequence[Any]) -> Tuple[Tuple[ScopeInstance, ...], Dict[int, Tuple[int, ...]]]:
    """Flat instances from merged annotations alone (no scope table recorded).

    ``nodes`` are :class:`NodeRecord` s; in local-id order (creation order) each run of
    consecutive annotated nodes with equal annotation is one instance. Nodes with no
    annotation, or a lane alone, break a run.
    """
    inst: List[ScopeInstance] = []
    per: Dict[int, Tuple[int, ...]] = {}
    prev: Optional[Mapping[str, Any]] = None
    for n in sorted(nodes, key=lambda n: n.key):
        ann = n.annotation
        if not ann or not is_named(ann):
            prev = None
            continue
        if prev is None or dict(ann) != dict(prev):
            inst.append(ScopeInstance(len(inst), _freeze({k: v for k, v in ann.items() if k not in LANE_FIELDS})))
            prev = ann
        per[n.key] = (len(inst) - 1,)
    return tuple(inst), per


def graph_scopes(graph: Any) -> Tuple[Mapping[int, ScopeInstance], Dict[int, Tuple[int, ...]]]:
    """(instance id -> instance, node key -> instance ids) of ``graph``, recorded or derived."""
    table = getattr(graph, "scopes", None)
    if table is None:
        inst, per = derive(graph.nodes)
    else:
        inst = table
        per = {n.key: n.scopes for n in graph.nodes if getattr(n, "scopes", ())}
    return {s.id: s for s in inst}, per


def path_of(instances: Mapping[int, ScopeInstance], iid: int) -> List[ScopeInstance]:
    """The chain from the outermost enclosing instance down to ``iid``."""
    chain: List[ScopeInstance] = []
    cur: Optional[int] = iid
    while cur is not None and cur in instances and len(chain) <= len(instances):
        s = instances[cur]
        chain.append(s)
        cur = s.parent
    chain.reverse()
    return chain
