"""Lanes with torch 2.15's semantics, and their names (docs/design.md, Contract 4).

``graph_lanes="all"``: every graphed event moves to its annotation's lane, else to lane 7,
and keeps its hardware stream as ``original_stream``. ``"none"``: every event stays on its
recorded stream and carries the lane it would have had as ``annotated_stream``.
"""
from __future__ import annotations

from typing import Any, Collection, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ..annotations.model import UNANNOTATED_GRAPH, AnnotationSet, GraphRecord, NodeRecord
from ..errors import LaneOptionError
from ..read.model import TraceEvent
from .match import Match
from .model import DEFAULT_GRAPH_LANE, Placement, lane_key

__all__ = ["annotated_lane", "annotated_lanes", "check_default_stream", "COLLECTIVE_NAME", "decide_graph_lanes",
           "GONE_GRAPHS_HINT", "graph_lane_name", "GRAPH_LANES", "has_annotated_nodes", "lane_graphs", "lane_name",
           "MAX_LANE_ID", "MAX_LANE_NAMES", "node_args", "PG_DESCRIPTION", "placement", "PLACEMENT_KEYS",
           "RESERVED_ARGS", "unrecorded_graphs"]

GRAPH_LANES = ("all", "none")
#: Lane ids are 32-bit, as in the sidecar.
MAX_LANE_ID = (1 << 32) - 1

#: Arg keys the join writes itself; annotation fields never override them.
RESERVED_ARGS = frozenset({"stream", "device", "correlation", "graph id", "graph node id", "replay", "join",
                           "join_ambiguous", "original_stream", "annotated_stream", "graph candidates"})
#: Eager collective fields used for a process-group lane's name.
COLLECTIVE_NAME = "Collective name"
PG_DESCRIPTION = "Process Group Description"


def annotated_lane(match: Optional[Match], default_stream: int = DEFAULT_GRAPH_LANE) -> int:
    """The lane an event belongs on: its annotation's ``stream`` field, else ``default_stream``."""
    if match is not None and match.node.lane is not None:
        return match.node.lane
    return default_stream


def node_args(node: NodeRecord, graph_known: bool = True) -> Dict[str, Any]:
    """The args every event of ``node`` gains: annotation fields (not ``stream``), graph ids
    (not when the replay may be one of several graphs: ``graph_known=False``)."""
    args = {k: v for k, v in node.annotation.items() if k not in RESERVED_ARGS}
    if graph_known:
        args["graph id"] = node.graph_id
        args["graph node id"] = node.key
    return args


#: The keys :func:`placement` (and the join) add besides a node's own args (:func:`node_args`).
PLACEMENT_KEYS = frozenset({"replay", "join", "join_ambiguous", "original_stream", "annotated_stream",
                            "graph candidates"})


def placement(event: TraceEvent, match: Optional[Match], replay_index: Optional[int], graph_lanes: str,
              cache: Optional[Dict[int, Tuple[int, Dict[str, Any]]]] = None,
              default_stream: int = DEFAULT_GRAPH_LANE) -> Placement:
    """Where a graphed event is drawn and the args it gains.

    ``cache`` (node key -> (lane, node args)) saves recomputing per-node parts per event;
    ``default_stream`` is the lane of graphed events whose annotation names none.
    """
    args: Dict[str, Any] = {}
    lane = default_stream
    annotation = None
    if match is not None:
        annotation = match.node.annotation
        node = match.node
        known = not match.shared_by
        ckey = node.key if known else ~node.key
        hit = cache.get(ckey) if cache is not None else None
        if hit is None:
            hit = (annotated_lane(match, default_stream), node_args(node, known))
            if cache is not None:
                cache[ckey] = hit
        lane, base = hit
        args.update(base)
        if replay_index is not None and known:
            args["replay"] = replay_index
        args["join"] = match.strategy
        if match.ambiguous:
            args["join_ambiguous"] = True
    hw = event.stream
    if graph_lanes == "all":
        if hw is not None:
            args["original_stream"] = hw
        return Placement(lane, args, annotation)
    args["annotated_stream"] = lane
    return Placement(hw if hw is not None else lane, args, annotation)


def has_annotated_nodes(annotations: AnnotationSet) -> bool:
    """Whether any node carries an annotation field: what a non-empty
    ``get_kernel_annotations()`` means in torch, which only lists annotated nodes."""
    return any(n.annotation for g in annotations.graphs for n in g.nodes)


def unrecorded_graphs(annotations: AnnotationSet) -> List[int]:
    """The graphs the replay record says were replayed that ``annotations`` hold no record of:
    captured without annotations, or (annotations of the live registry) garbage collected since."""
    if not annotations.replays:
        return []
    known = {g.exec_id for g in annotations.graphs}
    return sorted({e for w in annotations.replays for t in w.threads for e in t.graphs if e not in known})


#: What the refusal of ``"all"`` and the join's note add where the replay record names such graphs.
GONE_GRAPHS_HINT = ("graphs captured without annotations, or garbage collected before the export: a graph "
                    "object that is collected takes its annotations out of the registry, so keep it alive "
                    "until its profile is exported")


def _gone_text(gone: List[int]) -> str:
    """``unrecorded_graphs``' ids for a message; the record's :data:`UNANNOTATED_GRAPH` is no id."""
    ids = [g for g in gone if g != UNANNOTATED_GRAPH]
    parts = [f"graph id{'s' if len(ids) != 1 else ''} {', '.join(map(str, ids[:5]))}{', ...' if len(ids) > 5 else ''}"
             ] if ids else []
    if len(ids) < len(gone):
        parts.append("graphs captured without this package")
    return "; ".join(parts)


def _files(annotations: AnnotationSet, files: Optional[Sequence[str]]) -> str:
    names = list(files) if files else ([annotations.source] if annotations.source else [])
    return ", ".join(names) if names else "the annotations in memory"


def decide_graph_lanes(requested: Optional[str], annotations: Optional[AnnotationSet],
                       files: Optional[Sequence[str]] = None, trace: Optional[str] = None) -> str:
    """The one rule for ``graph_lanes``, used by every entry point (the join itself, the
    CLI's commands, ``merge``, ``trace_handler``, the fleet's workers).

    ``requested``: ``"all"`` or ``"none"`` as asked, or None for "the lanes where there are
    any": ``"all"`` where a node is annotated, else ``"none"``. ``"all"`` without an annotated
    node is refused as torch 2.15 refuses it (every graphed kernel would land on one lane,
    losing the stream layout and naming nothing): :class:`LaneOptionError` (a ``ValueError``
    too) naming ``files`` (the annotation files; default: ``annotations.source``), or
    ``trace`` when no annotations were given at all (``annotations`` None).
    """
    if requested is not None and requested not in GRAPH_LANES:
        raise LaneOptionError(trace, f"graph_lanes must be one of {GRAPH_LANES}, got {requested!r}")
    annotated = annotations is not None and has_annotated_nodes(annotations)
    if requested is None:
        return "all" if annotated else "none"
    if requested == "all" and not annotated:
        if annotations is None:
            raise LaneOptionError(trace, "--graph-lanes all (graph_lanes='all') needs annotations, and none were "
                                         "given: pass the sidecar saved at capture with --annotations, or use "
                                         "--graph-lanes none (torch 2.15 refuses 'all' without annotations too)")
        where = _files(annotations, files)
        gone = unrecorded_graphs(annotations)
        raise LaneOptionError(
            (list(files)[0] if files else annotations.source) or trace,
            f"graph_lanes='all' needs annotations (--graph-lanes all), and no node of {where} carries a field: "
            "every graphed kernel would land on default_stream, which loses the stream layout and names nothing "
            "in return (torch 2.15 raises the same); use graph_lanes='none'"
            + (f". The replay record names replayed graphs with no annotations here ({_gone_text(gone)}): "
               f"{GONE_GRAPHS_HINT}" if gone else ""))
    return requested


def annotated_lanes(annotations: AnnotationSet) -> Dict[int, str]:
    """Lane id -> its name (:func:`lane_name`) for every lane the annotations ask for: a
    node's ``stream`` field, a ``mark_stream`` or process-group label."""
    lanes: Set[int] = {n.lane for g in annotations.graphs for n in g.nodes if n.lane is not None}
    lanes.update(annotations.lanes)
    for g in annotations.graphs:
        if g.lanes:
            lanes.update(g.lanes)
    return {lane: lane_name(lane, annotations) for lane in sorted(lanes)}


def check_default_stream(default_stream: Any, annotations: Optional[AnnotationSet] = None,
                         files: Optional[Sequence[str]] = None, trace: Optional[str] = None) -> int:
    """``default_stream`` if it can be the lane of graphed kernels whose annotation names
    none: a lane id (an integer 0..2^32-1) that no annotation asks for (else those kernels
    would be drawn and measured as that lane's, e.g. ``attention``). The torch default 7 is
    always accepted (lane 7 stays ``stream 7`` whatever names it). Else :class:`LaneOptionError`
    naming the annotation file (or ``trace``)."""
    if isinstance(default_stream, bool) or not isinstance(default_stream, int) or \
            not 0 <= default_stream <= MAX_LANE_ID:
        raise LaneOptionError(trace, f"default_stream (--default-stream) {default_stream!r} is not a lane id "
                                     f"(an integer 0..{MAX_LANE_ID})")
    if annotations is None or default_stream == DEFAULT_GRAPH_LANE:
        return default_stream
    used = annotated_lanes(annotations)
    if default_stream in used:
        path = (list(files)[0] if files else annotations.source) or trace
        raise LaneOptionError(
            path, f"default_stream (--default-stream) {default_stream} is the lane '{used[default_stream]}' of "
                  f"{_files(annotations, files)}: the graphed kernels without a lane would be drawn and measured "
                  f"as part of it; pick a lane no annotation uses (annotated lanes: "
                  f"{', '.join(str(k) for k in used)}; default {DEFAULT_GRAPH_LANE})")
    return default_stream


#: A lane shared by graphs that name it differently shows at most this many of the names.
MAX_LANE_NAMES = 3


def graph_lane_name(lane: int, graph: GraphRecord, annotations: AnnotationSet) -> Optional[str]:
    """What one graph calls ``lane`` (Contract 4's precedence): its ``mark_stream`` / process
    group label, else the ``name`` of its first node (capture order) on the lane, else
    ``"<pg description> (<collective>)"`` of its first collective node there; None if nothing.

    Labels are the graph's own (:attr:`GraphRecord.lanes`); a graph without recorded labels
    (old sidecar) uses the set's process-wide :attr:`AnnotationSet.lanes`.
    """
    label = annotations.lane_labels(graph).get(lane)
    if label:
        return label
    nodes = [n for n in graph.nodes if n.lane == lane]
    for n in nodes:
        name = n.annotation.get("name")
        if isinstance(name, str) and name:
            return name
    for n in nodes:
        desc, coll = n.annotation.get(PG_DESCRIPTION), n.annotation.get(COLLECTIVE_NAME)
        if desc and coll:
            return f"{desc} ({coll})"
    return None


def lane_name(lane: int, annotations: AnnotationSet, graph_ids: Optional[Collection[int]] = None) -> str:
    """``"<id> <name>"`` from the graphs that put events on ``lane``, else ``"stream <id>"``.

    ``graph_ids``: exec ids of the graphs whose events are on this lane in the trace at
    hand (None: every graph of the set). Each graph names the lane by
    :func:`graph_lane_name`; distinct names are joined with ``" / "`` in the set's graph
    order (capture order), at most :data:`MAX_LANE_NAMES` then ``"(+k more)"``, so a lane
    two graphs share with different meanings says so, e.g. ``"61 right_projection / mlp"``.
    """
    names: List[str] = []
    for g in annotations.graphs:
        if graph_ids is not None and g.exec_id not in graph_ids:
            continue
        name = graph_lane_name(lane, g, annotations)
        if name and name not in names:
            names.append(name)
    if not names:
        return f"stream {lane}"
    text = " / ".join(names[:MAX_LANE_NAMES])
    if len(names) > MAX_LANE_NAMES:
        text += f" (+{len(names) - MAX_LANE_NAMES} more)"
    return f"{lane} {text}"


def lane_graphs(events: Iterable[TraceEvent], placements: Mapping[int, Placement],
                annotated: bool = False, shared: Optional[Mapping[int, Iterable[int]]] = None
                ) -> Dict[Tuple[int, int], Set[int]]:
    """(device, lane) -> exec ids of the graphs whose matched events are drawn on that lane.

    ``annotated``: use the lane an event carries as ``annotated_stream`` (graph_lanes="none")
    instead of the one it is drawn on. Unmatched events name no graph. ``shared``: event
    index -> the candidate graphs of an event labelled by several (no ``graph id`` arg).
    """
    out: Dict[Tuple[int, int], Set[int]] = {}
    shared = shared or {}
    for e in events:
        p = placements.get(e.index)
        if p is None:
            continue
        ids = [p.args["graph id"]] if "graph id" in p.args else shared.get(e.index)
        if not ids:
            continue
        lane = p.args.get("annotated_stream") if annotated else p.lane
        if lane is None:
            continue
        out.setdefault(lane_key(e.device, lane), set()).update(ids)
    return out
