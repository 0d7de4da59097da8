"""Lanes with torch 2.15's semantics, and their names (docs/design.md, Contract 4).

``graph_lanes="all"``: every graphed event moves to its annotation's lane, else to lane 7,
and keeps its hardware stream as ``original_stream``. ``"none"``: every event stays on its
recorded stream and carries the lane it would have had as ``annotated_stream``.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from ..capture.annotations import AnnotationSet, NodeRecord
from ..read.model import TraceEvent
from .match import Match
from .model import DEFAULT_GRAPH_LANE, Placement

GRAPH_LANES = ("all", "none")

#: Arg keys the join writes itself; annotation fields never override them.
RESERVED_ARGS = frozenset({"stream", "device", "correlation", "graph id", "graph node id", "replay", "join",
                           "join_ambiguous", "original_stream", "annotated_stream"})
#: Eager collective fields used for a process-group lane's name.
COLLECTIVE_NAME = "Collective name"
PG_DESCRIPTION = "Process Group Description"


def annotated_lane(match: Optional[Match]) -> int:
    """The lane an event belongs on: its annotation's ``stream`` field, else the default lane."""
    if match is not None and match.node.lane is not None:
        return match.node.lane
    return DEFAULT_GRAPH_LANE


def node_args(node: NodeRecord) -> Dict[str, Any]:
    """The args every event of ``node`` gains: annotation fields (not ``stream``), graph ids."""
    args = {k: v for k, v in node.annotation.items() if k not in RESERVED_ARGS}
    args["graph id"] = node.graph_id
    args["graph node id"] = node.key
    return args


def placement(event: TraceEvent, match: Optional[Match], replay_index: Optional[int], graph_lanes: str,
              cache: Optional[Dict[int, Tuple[int, Dict[str, Any]]]] = None) -> Placement:
    """Where a graphed event is drawn and the args it gains.

    ``cache`` (node key -> (lane, node args)) saves recomputing per-node parts per event.
    """
    args: Dict[str, Any] = {}
    lane = DEFAULT_GRAPH_LANE
    if match is not None:
        node = match.node
        hit = cache.get(node.key) if cache is not None else None
        if hit is None:
            hit = (annotated_lane(match), node_args(node))
            if cache is not None:
                cache[node.key] = hit
        lane, base = hit
        args.update(base)
        if replay_index is not None:
            args["replay"] = replay_index
        args["join"] = match.strategy
        if match.ambiguous:
            args["join_ambiguous"] = True
    hw = event.stream
    if graph_lanes == "all":
        if hw is not None:
            args["original_stream"] = hw
        return Placement(lane, args)
    args["annotated_stream"] = lane
    return Placement(hw if hw is not None else lane, args)


def lane_name(lane: int, annotations: AnnotationSet) -> str:
    """``"<id> <mark_stream label>"``, else ``"<id> <annotation name>"``, else for collectives
    ``"<id> <pg description> (<collective>)"``, else ``"stream <id>"``.

    The annotation name is the first (in capture order) of the nodes that ask for this lane.
    """
    label = annotations.lanes.get(lane)
    if label:
        return f"{lane} {label}"
    nodes = [n for g in annotations.graphs for n in g.nodes if n.lane == lane]
    for n in nodes:
        name = n.annotation.get("name")
        if isinstance(name, str) and name:
            return f"{lane} {name}"
    for n in nodes:
        desc, coll = n.annotation.get(PG_DESCRIPTION), n.annotation.get(COLLECTIVE_NAME)
        if desc and coll:
            return f"{lane} {desc} ({coll})"
    return f"stream {lane}"
