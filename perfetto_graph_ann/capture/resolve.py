"""Turn a finished capture into a :class:`GraphRecord`: rekey nodes and attach annotations.

Pure Python. Inputs are the template (capture) graph's node table, read by a backend
while the graph still exists, the merged scope annotations per node handle, and the
executable graph's id; calibration comes from :func:`calibration_table`.
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any, Dict, Iterable, Mapping, NamedTuple, Optional, Sequence, Tuple

from ..annotations.model import Dim3, GraphRecord, NodeRecord, ScopeInstance, rekey

__all__ = ["ActivityRecord", "ANNOTATED_NODE_TYPES", "calibration_table", "NodeInfo", "resolve_graph",
           "with_calibration"]

#: node types whose creation a scope annotates; the others (empty, child graph, ...) carry
#: nothing a profile shows.
ANNOTATED_NODE_TYPES = frozenset({"kernel", "memcpy", "memset", "host", "event_record", "event_wait"})


class NodeInfo(NamedTuple):
    """What a backend reads from one node of the template graph (a tuple: cheap to build)."""

    handle: int  #: cudaGraphNode_t as int (valid while the template graph lives)
    local_id: int  #: node local id: low 32 bits of the template key
    type: str = "kernel"
    kernel: Optional[str] = None
    grid: Optional[Dim3] = None
    block: Optional[Dim3] = None


def resolve_graph(
    nodes: Sequence[NodeInfo],
    annotations: Mapping[int, Mapping[str, Any]],
    exec_id: int,
    template_id: Optional[int] = None,
    device: Optional[int] = None,
    calibration: Optional[Mapping[int, Tuple[int, int]]] = None,
    lane_labels: Optional[Mapping[int, str]] = None,
    name: Optional[str] = None,
    scopes: Optional[Tuple[Tuple[ScopeInstance, ...], Mapping[int, Tuple[int, ...]]]] = None,
) -> GraphRecord:
    """Build the record of one executable graph.

    ``annotations`` maps node handle -> merged fields (from the scope recorder);
    ``calibration`` maps exec key -> (stream, ordinal); ``lane_labels`` the labels this
    capture gave lanes (``mark_stream``, process groups): the record keeps those of lanes
    its nodes are on (``None``: not recorded, the record's ``lanes`` stays ``None``);
    ``name`` the graph's display name; ``scopes`` the capture's scope instances and node
    handle -> ids of the instances around it (:func:`.scope_instances.from_ranges`).
    """
    instances, node_scopes = scopes if scopes is not None else ((), {})
    calibration = calibration or {}
    out = []
    for n in nodes:
        key = rekey(exec_id, n.local_id)
        annotated = n.type in ANNOTATED_NODE_TYPES
        ann = dict(annotations.get(n.handle, {})) if annotated else {}
        stream, ordinal = calibration.get(key, (None, None))
        out.append(NodeRecord(key=key, type=n.type, kernel=n.kernel, grid=n.grid, block=n.block,
                              annotation=ann, stream=stream, ordinal=ordinal,
                              scopes=node_scopes.get(n.handle, ()) if annotated else ()))
    out.sort(key=lambda r: r.key)
    lanes = None
    if lane_labels is not None:
        used = {r.lane for r in out}
        lanes = types.MappingProxyType({k: v for k, v in sorted(lane_labels.items()) if k in used})
    return GraphRecord(exec_id=exec_id, nodes=tuple(out), template_id=template_id, device=device, lanes=lanes,
                       name=name, scopes=tuple(instances) if scopes is not None else None)


def with_calibration(record: GraphRecord, calibration: Mapping[int, Tuple[int, int]]) -> GraphRecord:
    """A copy of ``record`` with (stream, ordinal) set from ``calibration`` (exec key -> pair)."""
    nodes = []
    for n in record.nodes:
        s, o = calibration.get(n.key, (None, None))
        nodes.append(dataclasses.replace(n, stream=s, ordinal=o))
    return dataclasses.replace(record, nodes=tuple(nodes))


class ActivityRecord(NamedTuple):
    """One GPU activity record of a calibration replay (CUPTI kernel / memcpy / memset).

    A tuple: a replay of a large graph gives a thousand of them, built from the C parser's
    tuples without a Python constructor call each.
    """

    graph_node_id: int
    stream: int
    start: int
    end: int = 0
    kind: str = "kernel"


def calibration_table(records: Iterable[ActivityRecord], exec_id: int) -> Dict[int, Tuple[int, int]]:
    """exec key -> (stream, ordinal) from the records of exactly one replay of ``exec_id``.

    The ordinal counts every GPU work record (kernel, memcpy, memset) on that stream, in
    start order (ties: end, then node key), which is how a profile's events of one replay
    are numbered per stream. Records of other graphs are ignored; a node seen twice (more
    than one replay recorded) keeps its first position.
    """
    # rows as (start, end, key, stream): one C-level sort of plain tuples (a replay of a large
    # graph gives a thousand records, sorted while the user's first replay waits)
    rows = sorted((r.start, r.end, r.graph_node_id, r.stream) for r in records
                  if r.graph_node_id and r.graph_node_id >> 32 == exec_id)
    seen: Dict[int, int] = {}
    table: Dict[int, Tuple[int, int]] = {}
    for _, _, key, stream in rows:
        if key in table:
            continue
        o = seen.get(stream, 0)
        table[key] = (stream, o)
        seen[stream] = o + 1
    return table
