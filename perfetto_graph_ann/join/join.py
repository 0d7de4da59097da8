"""The join: replayed GPU events x annotations -> :class:`LaneLayout`.

Each replay is joined with the best strategy its data allows, event by event: exact
(``graph node id`` args), then calibrated (stream + ordinal), then structural (name,
grid, block, order). Later strategies only see events the earlier ones left, and only
the graph an earlier strategy chose for that replay.

Before anything is matched, each annotation file's capture identity is compared with the
trace (``join/identity.py``); afterwards, annotations that matched none of the trace's
graph replays are refused too. Both raise
:class:`~perfetto_graph_ann.errors.AnnotationMismatchError` unless ``force``, and the
report records what was overridden.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from .. import settings
from ..annotations.model import MODULE_ORIGIN, AnnotationSet, NodeRecord
from ..errors import AnnotationMismatchError
from ..read.model import KinetoTrace, TraceEvent
from . import critical_path, identity
from .calibrated import match_calibrated
from .exact import match_exact
from .lanes import (PLACEMENT_KEYS, annotated_lane, check_default_stream, decide_graph_lanes,  # noqa: F401
                    has_annotated_nodes, lane_graphs, lane_name, node_args, placement)
from .launches import launch_identities
from .match import GraphFit, Match, device_ok, replay_signatures
from .projection import project
from .model import (DEFAULT_GRAPH_LANE, EXACT_IDS, KERNELS, RECORDED, UNANNOTATED, CompactPlacements, JoinReport,
                    LaneLayout, matched_placement, mutable_placement)
from .ahead import Made, match_alone
from .replays import Replay, gpu_work_and_replays
from .structural import match_structural

try:  # the per-replay loops in C (_rows.c, built by hatch_build.py): the same placements and lane names
    from ._rows import lane_keys as _compiled_lane_keys, place_rows as _compiled_place_rows
except ImportError:
    _compiled_place_rows = _compiled_lane_keys = None
#: :func:`_place_compact`'s and :func:`_lane_names`' loops over a replay's events in C, or None where
#: they are not built or ``PERFETTO_GRAPH_ANN_PURE_PYTHON`` was set at import (the Python loops then)
ROW_LOOPS = None if settings.switch(settings.PURE_PYTHON) or _compiled_place_rows is None else (
    _compiled_place_rows, _compiled_lane_keys)

IN_MEMORY = "(annotations in memory)"


def _name(s: AnnotationSet) -> str:
    return s.source or IN_MEMORY


def _check_identities(trace: KinetoTrace, sources: Sequence[AnnotationSet], force: bool, report: JoinReport,
                      every_launch: Sequence[TraceEvent]) -> Optional[Set[int]]:
    """Refuse annotations of another process (unless ``force``); returns the trace's pids where
    it needed them (None: not asked), for the launch identities. ``every_launch``: the trace's
    graph launch events."""
    pids: Optional[Set[int]] = None
    for src in sources:
        if not src.graphs:
            continue
        name = _name(src)
        if src.capture is None:
            report.identity_missing.append(name)
            continue
        if pids is None:
            pids = identity.trace_pids(trace, every_launch)
        diffs = identity.differences(src.capture, trace, pids)
        if not diffs:
            report.identity_checked[name] = identity.compared_fields(src.capture, trace, pids)
        elif force:
            report.identity_overridden[name] = diffs
        else:
            raise AnnotationMismatchError(
                src.source, trace.path,
                f"these annotations were captured by another process than the one that recorded {trace.path} "
                f"({'; '.join(diffs)}): their graph ids name other graphs. Pass --force-annotations (CLI) "
                "or force=True (Python) to join them anyway", diffs)
    return pids


def _refuse_no_match(trace: KinetoTrace, annotations: AnnotationSet, sources: Sequence[AnnotationSet],
                     replays: List[Replay], force: bool, report: JoinReport) -> None:
    """Annotations read from a file, or holding graphs, that match none of the trace's graph
    replays belong to another run (or were saved before the capture). An in-memory set without
    graphs (nothing captured in this process) labels nothing and is not an error."""
    from_file = any(s.source for s in sources)
    if not (annotations.graphs or from_file) or not report.graphed or sum(report.matched.values()):
        return
    if report.unidentified_replays or report.unannotated_replays:
        return  # they fit the replays (or the record names the graphs): the graph is unknown, not foreign
    if force:
        report.no_match_overridden = True
        return
    why = "; ".join(f"{n} replay{'s' if n != 1 else ''}: {r}" for r, n in sorted(report.unmatched_replays.items()))
    named = [s for s in sources if s.graphs or s.source] or [annotations]
    files = ", ".join(_name(s) for s in named)
    checked = report.identity_checked
    if all(s.capture is not None and "pid" in checked.get(_name(s), ()) for s in named):
        whose = ("they were saved by the process that recorded it (its pid), so its replayed graphs were captured "
                 "after they were saved, or replayed other GPU work than was captured")
    else:
        whose = "they are from another run or program"
    raise AnnotationMismatchError(
        files, trace.path,
        f"these annotations match none of the {len(replays)} graph replays ({report.graphed} GPU events) in "
        f"{trace.path} ({why}): {whose}. Pass --force-annotations (CLI) or "
        "force=True (Python) to join them anyway", tuple(report.unmatched_replays))


def join(trace: KinetoTrace, annotations: AnnotationSet, graph_lanes: Optional[str] = "none",
         default_stream: int = DEFAULT_GRAPH_LANE, force: bool = False,
         sources: Optional[Sequence[AnnotationSet]] = None, projection: bool = True,
         edge_flows: bool = False, compact: bool = False, made: "Optional[Made]" = None) -> LaneLayout:
    """Place every replayed GPU work event of ``trace`` on a lane, with its annotation as args.

    Events not launched by a graph are left alone (no placement). Runs in phases: the lane
    options and identities are checked, each replay is attributed to its graph and its
    events to nodes (:class:`_Attribution`), the events are placed (:func:`_place`), the
    lanes named (:func:`_lane_names`) and the GPU ranges projected (:func:`.projection.project`).

    Args:
        trace: the read torch.profiler trace.
        annotations: the capture's annotations (merged when several files were given).
        graph_lanes: as in torch 2.15's ``export_chrome_trace``: ``"none"`` (its default)
            keeps the recorded streams and adds ``annotated_stream``; ``"all"`` moves graphed
            events to their annotated lane, else to ``default_stream``; None: ``"all"`` where
            a node is annotated, else ``"none"`` (:func:`~.lanes.decide_graph_lanes`).
        default_stream: the lane of graphed events without one under ``"all"``.
        force: join annotations whose identity disagrees with the trace (the report says
            what was overridden).
        sources: the sets ``annotations`` was merged from (one per file), so each file's
            identity is checked; default ``[annotations]``.
        projection: also the replay and scope ranges the Perfetto writer draws under each
            GPU (``LaneLayout.ranges``), and on drawn replays of graphs with recorded edges
            the critical path as args (:mod:`.critical_path`).
        edge_flows: those replays' dependency edges as flows between their GPU work too
            (``LaneLayout.edge_flows``; none above ``critical_path.EDGE_FLOWS_MAX``, with a
            note in the report).
        compact: the placements as a :class:`~.model.CompactPlacements` (the same placements
            made when asked for, a few bytes each held: the two-pass convert's), not a dict.
        made: per-replay results made while the trace was still written (:class:`.ahead.Made`,
            from these very ``annotations``; else not used): each taken where it still holds,
            the same results as made here.

    Returns:
        The :class:`LaneLayout`: placements, lane names, report and ranges.

    Raises:
        LaneOptionError: ``"all"`` with annotations in which no node carries a field (as
            torch refuses it), or a ``default_stream`` that is not a lane id or is a lane an
            annotation asks for (a ``ValueError``).
        AnnotationMismatchError: an annotation file's capture identity disagrees with the
            trace, or annotations with graphs match none of its graph replays; not with
            ``force``.
    """
    sources = list(sources) if sources is not None else [annotations]
    files = [s.source for s in sources if s.source] or None
    # the one rule for the lane options (join/lanes.py): every entry point comes through here
    graph_lanes = decide_graph_lanes(graph_lanes, annotations, files, trace.path)
    default_stream = check_default_stream(default_stream, annotations, files, trace.path)
    report = JoinReport()
    report.annotation_files = [s.source for s in sources if s.source]
    every_launch: List[TraceEvent] = []
    report.total, replays = gpu_work_and_replays(trace, every_launch)
    pids = _check_identities(trace, sources, force, report, every_launch)
    report.graphed = sum(len(r.events) for r in replays)
    if made is not None and made.annotations is not annotations:
        made = None
    attribution = _Attribution(trace, replays, annotations, report, pids, every_launch, made)
    for r in replays:
        attribution.join_replay(r)
        r.signatures = None  # asked for by this replay's join alone
    matches, replay_graph = attribution.matches, attribution.replay_graph
    replay_index = _replay_indices(replays, replay_graph)
    cache: Dict = {}
    placements = _place(replays, matches, replay_index, graph_lanes, default_stream, cache, report,
                        len(trace.events) if compact else None)
    _refuse_no_match(trace, annotations, sources, replays, force, report)
    for idx, by in attribution.shared.items():  # labels shared by several candidate graphs name them
        mutable_placement(placements, idx).args["graph candidates"] = attribution.candidate_names(by)
    lane_names = (_lane_names(replays, placements, attribution.shared, annotations, default_stream)
                  if graph_lanes == "all" else {})
    arg_keys = PLACEMENT_KEYS.union(*(base for _, base in cache.values()))
    ranges = project(replays, matches, replay_graph, replay_index, annotations, report,
                     attribution.replay_candidates, made.ranges_of if made is not None else None) if projection else []
    flows = _critical_paths(replays, matches, replay_graph, ranges, attribution, placements, report, edge_flows,
                            made)
    if made is not None:
        made.clear()
    if report.critical_paths.get(critical_path.SOURCE_EDGES):
        arg_keys = arg_keys | {critical_path.PATH_ARG, critical_path.SLACK_ARG}
    return LaneLayout(placements=placements, lane_names=dict(sorted(lane_names.items())), report=report,
                      graph_lanes=graph_lanes, arg_keys=arg_keys, ranges=ranges, edge_flows=flows)


def _critical_paths(replays: List[Replay], matches: Dict[int, Match], replay_graph: Dict, ranges: List,
                    attribution: "_Attribution", placements: Dict[int, Any], report: JoinReport,
                    edge_flows: bool, made: "Optional[Made]" = None) -> List:
    """The critical path of each drawn replay of a graph with recorded edges, as args; the
    dependency flows when asked (none above ``critical_path.EDGE_FLOWS_MAX``, with a note)."""
    flows = critical_path.annotate_replays(replays, matches, replay_graph, ranges, attribution.by_id, placements,
                                           report.critical_paths, edge_flows,
                                           made.path_of if made is not None else None)
    if len(flows) > critical_path.EDGE_FLOWS_MAX:
        report.edge_flows_note = (f"{len(flows)} dependency edges: more than {critical_path.EDGE_FLOWS_MAX}, "
                                  "drawn as no flows (the trace would load slowly)")
        return []
    if edge_flows and not flows and report.critical_paths.get(critical_path.REASON_NO_EDGES):
        report.edge_flows_note = ("no dependency edges recorded for the replayed graphs (annotations saved before "
                                  "sidecar version 4, capture records): no dependency flows drawn")
    return flows


def _place(replays: List[Replay], matches: Dict[int, Match], replay_index: Dict[int, int], graph_lanes: str,
           default_stream: int, cache: Dict, report: JoinReport, compact: Optional[int] = None) -> Any:
    """Every replayed event's placement (lane and args); counts matched and unmatched.

    :func:`~.lanes.placement`'s rule, with its per-node part looked up inline for the usual
    event (matched to a node of a known graph): the same placements, one call fewer per event.
    ``compact`` (the number of events): held in a :class:`CompactPlacements`, else a dict."""
    every = graph_lanes == "all"
    if compact is not None:
        return _place_compact(replays, matches, replay_index, graph_lanes, default_stream, cache, report,
                              CompactPlacements(compact, every))
    placements = {}
    get = matches.get
    origins: Dict[Any, Any] = {}  # node key -> its module origin (None: none); _count's work inline
    matched, by_origin = report.matched, report.module_origins
    ambiguous = 0
    for r in replays:
        index = replay_index.get(r.correlation)
        for e in r.events:
            m = get(e.index)
            if m is None or m.shared_by:
                placements[e.index] = placement(e, m, index if m else None, graph_lanes, cache, default_stream)
                _count(report, m)
            else:
                node = m.node
                key = node.key
                hit = cache.get(key)
                if hit is None:
                    hit = cache[key] = (annotated_lane(m, default_stream), node_args(node, True))
                hw = e.args.get("stream")
                if type(hw) is not int:
                    hw = e.stream
                placements[e.index] = matched_placement(every, hit[0], hit[1], node.annotation, index, m.strategy,
                                                        m.ambiguous, hw)
                matched[m.strategy] += 1
                if m.ambiguous:
                    ambiguous += 1
                origin = origins.get(key, origins)
                if origin is origins:
                    origin = origins[key] = node.annotation.get(MODULE_ORIGIN)
                if origin is not None:
                    by_origin[origin] = by_origin.get(origin, 0) + 1
    report.ambiguous += ambiguous
    return placements


def _count(report: JoinReport, m: Optional[Match]) -> None:
    """One GPU event's outcome in the join report."""
    if m is None:
        report.unmatched += 1
        return
    report.matched[m.strategy] += 1
    report.ambiguous += int(m.ambiguous)
    origin = m.node.annotation.get(MODULE_ORIGIN)
    if origin is not None:
        report.module_origins[origin] = report.module_origins.get(origin, 0) + 1


def _place_compact(replays: List[Replay], matches: Dict[int, Match], replay_index: Dict[int, int], graph_lanes: str,
                   default_stream: int, cache: Dict, report: JoinReport, placements: CompactPlacements) -> Any:
    """:func:`_place` into ``placements``: the same placements and counts, the usual ones as a
    row of columns each (:meth:`CompactPlacements.add`'s work and :func:`_count`'s inline: one
    frame for a trace's millions of graphed events)."""
    get = matches.get
    # node key -> (node's index in placements.nodes, its module origin or None)
    nodes: Dict[Any, Tuple[int, Any]] = {}
    row, kept, node_ids, node_list = placements.row, placements.kept, placements.node_ids, placements.nodes
    add_node, add_replay = placements.node.append, placements.replay.append
    add_hw, add_how, add_order = placements.hw.append, placements.how.append, placements.order.append
    none, size = CompactPlacements._NONE, len(row)
    top = 1 << 31
    how_of = CompactPlacements.HOW
    rows = len(placements.node)
    matched = report.matched
    origins = report.module_origins
    ambiguous = 0

    def hit_of(m: Match) -> Tuple[int, Any, Tuple]:
        """A node met first: its number in ``placements.nodes``, its module origin, its (lane, args, annotation)."""
        node = m.node
        key = node.key
        lane_args = cache.get(key)
        if lane_args is None:
            lane_args = cache[key] = (annotated_lane(m, default_stream), node_args(node, True))
        triple = (lane_args[0], lane_args[1], node.annotation)
        n = node_ids.get(key)
        if n is None:
            n = node_ids[key] = len(node_list)
            node_list.append(triple)
        hit = nodes[key] = (n, node.annotation.get(MODULE_ORIGIN), triple)
        return hit

    for r in replays:
        index = replay_index.get(r.correlation)
        replay_col = none if index is None else index
        small_replay = index is None or none < index < top
        if ROW_LOOPS is not None and type(r.events) is list:
            def slow(e: TraceEvent, m: Optional[Match], index: Optional[int] = index) -> None:
                placements.put(e.index, placement(e, m, index if m else None, graph_lanes, cache, default_stream))
                _count(report, m)
            ambiguous += ROW_LOOPS[0](r.events, (  # _rows.c's order
                matches, nodes, row, kept, placements.order, placements.node, placements.replay, placements.hw,
                placements.how, how_of, matched, origins, replay_col, small_replay, index, slow, hit_of,
                placements.add))
            continue
        rows = len(placements.node)  # the compiled loop may have added rows to an earlier replay
        for e in r.events:
            i = e.index
            m = get(i)
            if m is None or m.shared_by:
                placements.put(i, placement(e, m, index if m else None, graph_lanes, cache, default_stream))
                _count(report, m)
                continue
            node = m.node
            key = node.key
            hit = nodes.get(key)
            if hit is None:
                hit = hit_of(m)
            hw = e.args.get("stream")
            if type(hw) is not int:
                hw = e.stream
            strategy = m.strategy
            if small_replay and (hw is None or none < hw < top) and 0 <= i < size:
                if row[i] < 0 and i not in kept:  # not yet placed
                    add_order(i)
                row[i] = rows
                rows += 1
                add_node(hit[0])
                add_replay(replay_col)
                add_hw(none if hw is None else hw)
                add_how(how_of[strategy] + (8 if m.ambiguous else 0))
            else:
                placements.add(i, key, hit[2], index, strategy, m.ambiguous, hw)
                rows = len(placements.node)
            matched[strategy] += 1
            if m.ambiguous:
                ambiguous += 1
            origin = hit[1]
            if origin is not None:
                origins[origin] = origins.get(origin, 0) + 1
    report.ambiguous += ambiguous
    return placements


def _lane_names(replays: List[Replay], placements: Dict[int, Any], shared: Dict[int, Tuple[int, ...]],
                annotations: AnnotationSet, default_stream: int) -> Dict[Any, str]:
    """Under ``graph_lanes="all"``: each lane named by the graphs whose events are on it in
    this trace (lane labels are per graph). The default lane keeps its stream name even if an
    annotation asks for it explicitly: it also holds every graphed event without a lane.
    ``shared``: event index -> the candidate graphs of a label they share (``_Attribution.shared``)."""
    # lane_graphs' rule (the graphs on each lane) in the same pass that finds the lanes in order
    graphs_on: Dict[Tuple[int, int], set] = {}
    lanes: Dict[Tuple[int, int], Any] = {}  # (device, lane) -> lane, in first-seen order
    # a compact row's lane and node args without making its placement (they hold the graph id):
    # CompactPlacements.lane_and_args's work inline, the call for anything but a row
    compact = isinstance(placements, CompactPlacements)
    if compact:
        lane_and_args, row, node, nodes, hw_col = (placements.lane_and_args, placements.row, placements.node,
                                                    placements.nodes, placements.hw)
        rows, every, none = len(row), placements.every, CompactPlacements._NONE
    for r in replays:
        if compact and ROW_LOOPS is not None and type(r.events) is list:
            ROW_LOOPS[1](r.events, (row, node, hw_col, nodes, every, lane_and_args, shared, lanes, graphs_on))
            continue
        for e in r.events:
            if not compact:
                p = placements[e.index]
                lane, pa = p.lane, p.args
            else:
                i = e.index
                at = row[i] if 0 <= i < rows else -1
                if at < 0:
                    lane, pa = lane_and_args(i)
                else:
                    lane, pa, _ = nodes[node[at]]
                    if not every:
                        hw = hw_col[at]
                        if hw != none:
                            lane = hw
            d = e.args.get("device")
            if type(d) is not int:
                d = e.device
            key = (d if d is not None else 0, lane)
            if key not in lanes:
                lanes[key] = lane
            ids = [pa["graph id"]] if "graph id" in pa else shared.get(e.index)
            if ids and lane is not None:
                on = graphs_on.get(key)
                if on is None:
                    on = graphs_on[key] = set()
                on.update(ids)
    lane_names: Dict[Any, str] = {}
    for key, lane in lanes.items():
        on_lane = graphs_on.get(key)
        lane_names[key] = (lane_name(lane, annotations, on_lane) if on_lane and lane != default_stream
                           else f"stream {lane}")
    return lane_names


class _Attribution:
    """Which graph each replay is, and its events' nodes: the join's per-replay phase.

    A replay's graph is known from the trace's own ids (exact), else from the replay record
    (which graph each launch replayed, :mod:`.launches`), else it is the only annotated
    graph whose nodes its GPU work fits. Calibration and the structural pairing then run
    against that graph alone. A replay that may be several graphs keeps no label unless
    every candidate gives each of its events the same annotation (then the events carry it,
    without a graph id); a replay the record names as a graph without annotations keeps none.
    """

    def __init__(self, trace: KinetoTrace, replays: List[Replay], annotations: AnnotationSet, report: JoinReport,
                 pids: Optional[Set[int]] = None, every_launch: Optional[Sequence[TraceEvent]] = None,
                 made: "Optional[Made]" = None):
        self.annotations, self.report, self.made = annotations, report, made
        self._nodes_by_key: Optional[Dict[int, NodeRecord]] = None  # built once a trace has graph node ids
        self.by_id = {g.exec_id: g for g in annotations.graphs}
        self.fit = GraphFit()
        self.matches: Dict[int, Match] = {}
        #: event index -> the candidate graphs whose label it shares (the matches with ``shared_by``,
        #: made by :meth:`_shared` alone), in the order of ``matches``
        self.shared: Dict[int, Tuple[int, ...]] = {}
        self.replay_graph: Dict[int, Optional[int]] = {}
        #: replay correlation -> the graphs it may be, where the join could not tell
        self.replay_candidates: Dict[int, Tuple[int, ...]] = {}
        self.launched: Optional[Dict[int, FrozenSet[int]]] = None
        self._shapes: Dict[int, frozenset] = {}  # replay correlation -> the shape of all its GPU work
        if annotations.replays is not None:
            by_corr = {r.correlation: r for r in replays}
            ids = launch_identities(trace, annotations.replays, lambda corr, g: self._may_be(by_corr.get(corr), g),
                                    pids, every_launch)
            self.launched = ids.graphs
            report.replay_record = True
            report.replay_record_problems = ids.problems

    def _exact(self, events: Sequence[TraceEvent]) -> Dict[int, Match]:
        """:func:`match_exact` on ``events``; every node by key is built for the first replay
        with a ``graph node id`` (torch 2.11's Kineto writes none: then never)."""
        if not any("graph node id" in e.args for e in events):
            return {}
        if self._nodes_by_key is None:
            self._nodes_by_key = self.annotations.nodes_by_key()
        return match_exact(events, self._nodes_by_key)

    def _may_be(self, r: Optional[Replay], exec_id: int) -> bool:
        g = self.by_id.get(exec_id)
        if g is None or r is None or not r.events:
            return True
        if not device_ok(g.device, r.events[0].device):
            return False
        return self.fit.fits_shape(self._shape(r), g)

    def _shape(self, r: Replay) -> frozenset:
        """The shape of all of ``r``'s GPU work, once per replay (made ahead where it was: the
        signatures it is made of are only asked for by the calibration besides)."""
        shape = self._shapes.get(r.correlation)
        if shape is None:
            shape = self.made.shape_of(r) if self.made is not None else None
            if shape is None:
                shape = self.fit.shape(r.events, replay_signatures(r))
            self._shapes[r.correlation] = shape
        return shape

    def candidate_names(self, ids: Iterable[int]) -> str:
        return " | ".join(self.by_id[i].display_name if i in self.by_id else f"graph {i}" for i in ids)

    def _count(self, table: Dict[str, int], key: str, n: int = 1) -> None:
        table[key] = table.get(key, 0) + n

    def _candidates(self, r: Replay, pending: List[TraceEvent]) -> Tuple[List[int], bool, str]:
        """The annotated graphs ``r`` may be, whether it may also be a graph without annotations,
        and how that was decided."""
        recorded = self.launched.get(r.correlation) if self.launched is not None else None
        if recorded:
            return sorted(g for g in recorded if g in self.by_id), any(g not in self.by_id for g in recorded), RECORDED
        # once, not once per graph; all of it where no event had a node id
        shape = self._shape(r) if len(pending) == len(r.events) else self.fit.shape(pending, replay_signatures(r))
        fitting = [g.exec_id for g in self.annotations.graphs
                   if device_ok(g.device, r.device) and self.fit.fits_shape(shape, g)]
        return fitting, False, KERNELS

    def join_replay(self, r: Replay) -> None:
        report = self.report
        found = self._exact(r.events)
        chosen = _majority_graph(found)
        how = EXACT_IDS if chosen is not None else None
        pending = [e for e in r.events if e.index not in found] if found else list(r.events)  # no ids: every event
        if chosen is None and pending:
            cands, other, how = self._candidates(r, pending)
            if other and not cands:
                self._count(report.replay_graphs, UNANNOTATED)
                report.unannotated_replays += 1
                report.unannotated_replay_events += len(pending)
                self.replay_graph[r.correlation] = None
                return
            if len(cands) > 1 or other:
                self._several(r, cands, other, pending)
                return
            chosen = cands[0] if cands else None
        pending_idx = [e.index for e in pending]
        structural = None
        if pending_idx and chosen is not None and not found:  # the usual replay: one graph, no node ids
            ahead = self.made.matches_of(r, chosen) if self.made is not None else None
            cal, structural = ahead if ahead is not None else match_alone(r, self.annotations.graphs, chosen)
            found.update(cal)
            pending_idx = [i for i in pending_idx if i not in cal]
        elif pending_idx:
            # no graph fits the whole replay (a cut replay, work the node table lacks): the
            # calibration of any graph may still name some events, unless two graphs tie
            cal, g = match_calibrated(r, self.annotations.graphs, pending_idx, only_graph=chosen)
            if chosen is None and any(m.ambiguous for m in cal.values()):
                cal = {}
            found.update(cal)
            if chosen is None and cal:
                chosen, how = g, KERNELS
            pending_idx = [i for i in pending_idx if i not in cal]
            if pending_idx:
                used = {m.node.key for m in found.values()}
                structural = match_structural(r, self.annotations.graphs, pending_idx, only_graph=chosen,
                                              used_keys=used)
        if structural is not None:
            st, g, why = structural
            found.update(st)
            chosen = chosen if chosen is not None else g
            if why:
                self._count(report.unmatched_replays, why)
                self._count(report.unmatched_replay_events, why, len(pending_idx))
            elif st:
                gr = self.by_id.get(g) if g is not None else None
                if gr is not None and gr.calibration_note:
                    report.calibration_notes[gr.display_name] = gr.calibration_note
        if how == KERNELS and not found:
            chosen = None  # inferred from the kernels, matched nowhere: not counted among its replays
        if chosen is not None and how is not None:
            self._count(report.replay_graphs, how)
        self.matches.update(found)
        self.replay_graph[r.correlation] = chosen

    def _several(self, r: Replay, cands: List[int], other: bool, pending: List[TraceEvent]) -> None:
        """A replay that may be any of ``cands`` (or, with ``other``, a graph without annotations)."""
        names = self.candidate_names(cands) + (" | a graph without annotations" if other else "")
        self.replay_graph[r.correlation] = None
        self.replay_candidates[r.correlation] = tuple(cands)
        shared = None if other else self._shared(r, cands, [e.index for e in pending])
        if shared is None:
            self._count(self.report.unidentified_replays, names)
            self._count(self.report.unidentified_replay_events, names, len(pending))
            return
        self._count(self.report.shared_label_replays, names)
        self.matches.update(shared)
        self.shared.update((i, m.shared_by) for i, m in shared.items())

    def _shared(self, r: Replay, cands: List[int], pending: List[int]) -> Optional[Dict[int, Match]]:
        """Every candidate's matches of the replay, when each candidate matches every event and
        all give each event the same annotation: the first candidate's, marked shared."""
        first: Optional[Dict[int, Match]] = None
        for gid in cands:
            cal, _ = match_calibrated(r, self.annotations.graphs, pending, only_graph=gid)
            rest = [i for i in pending if i not in cal]
            st, _, why = (match_structural(r, self.annotations.graphs, rest, only_graph=gid,
                                           used_keys={m.node.key for m in cal.values()}) if rest else ({}, gid, None))
            found = {**cal, **st}
            if why or len(found) != len(pending):
                return None
            if first is None:
                first = found
            elif any(found[i].node.annotation != first[i].node.annotation for i in pending):
                return None
        shared_by = tuple(cands)
        return {i: dataclasses.replace(m, ambiguous=True, shared_by=shared_by) for i, m in (first or {}).items()}


def _majority_graph(found: Dict[int, Match]) -> Optional[int]:
    if not found:
        return None
    return Counter(m.node.graph_id for m in found.values()).most_common(1)[0][0]


def _replay_indices(replays: List[Replay], replay_graph: Dict[int, Optional[int]]) -> Dict[int, int]:
    """replay correlation -> 0-based index among the replays of the same graph (launch order).

    Only replays whose launch is in the trace are numbered: one without (its launch was
    before the profiling window) ran before every launch the trace shows, but its GPU start
    says nothing about that, and the CPU runs ahead of the GPU, so ordering it among the
    others by time would give it, and them, wrong numbers.
    """
    counters: Dict[int, int] = {}
    out: Dict[int, int] = {}
    for r in replays:
        g = replay_graph.get(r.correlation)
        if g is None or r.launch is None:
            continue
        out[r.correlation] = counters.get(g, 0)
        counters[g] = out[r.correlation] + 1
    return out


__all__ = ["join", "has_annotated_nodes", "DEFAULT_GRAPH_LANE"]
