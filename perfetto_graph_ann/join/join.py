"""The join: replayed GPU events x annotations -> :class:`LaneLayout`.

Each replay is joined with the best strategy its data allows, event by event: exact
(``graph node id`` args), then calibrated (stream + ordinal), then structural (name,
grid, block, order). Later strategies only see events the earlier ones left, and only
the graph an earlier strategy chose for that replay.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional

from ..capture.annotations import AnnotationSet
from ..read.model import KinetoTrace
from .calibrated import match_calibrated
from .exact import match_exact
from .lanes import GRAPH_LANES, lane_graphs, lane_name, placement
from .match import Match
from .projection import project
from .model import DEFAULT_GRAPH_LANE, JoinReport, LaneLayout, lane_key
from .replays import Replay, find_replays
from .structural import match_structural


def join(trace: KinetoTrace, annotations: AnnotationSet, graph_lanes: str = "all", projection: bool = True) -> LaneLayout:
    """Place every replayed GPU work event of ``trace`` on a lane, with its annotation as args.

    ``graph_lanes``: ``"all"`` moves graphed events to their annotated lane (else lane 7);
    ``"none"`` keeps the recorded streams and adds ``annotated_stream``. Events not
    launched by a graph are left alone (no placement). ``projection``: also the replay and
    scope ranges the Perfetto writer draws under each GPU (``LaneLayout.ranges``).
    """
    if graph_lanes not in GRAPH_LANES:
        raise ValueError(f"graph_lanes must be one of {GRAPH_LANES}, got {graph_lanes!r}")
    replays = find_replays(trace)
    nodes_by_key = annotations.nodes_by_key()
    graphs = annotations.graphs
    report = JoinReport(total=sum(1 for e in trace.events if e.is_gpu_work))
    report.graphed = sum(len(r.events) for r in replays)

    matches: Dict[int, Match] = {}
    replay_graph: Dict[int, Optional[int]] = {}
    for r in replays:
        found = match_exact(r.events, nodes_by_key)
        chosen = _majority_graph(found)
        pending = [e.index for e in r.events if e.index not in found]
        if pending:
            cal, g = match_calibrated(r, graphs, pending, only_graph=chosen)
            found.update(cal)
            chosen = chosen if chosen is not None else g
            pending = [i for i in pending if i not in cal]
        if pending:
            used = {m.node.key for m in found.values()}
            st, g = match_structural(r, graphs, pending, only_graph=chosen, used_keys=used)
            found.update(st)
            chosen = chosen if chosen is not None else g
        matches.update(found)
        replay_graph[r.correlation] = chosen

    replay_index = _replay_indices(replays, replay_graph)
    placements = {}
    cache: Dict = {}
    for r in replays:
        for e in r.events:
            m = matches.get(e.index)
            placements[e.index] = placement(e, m, replay_index.get(r.correlation) if m else None, graph_lanes, cache)
            if m is None:
                report.unmatched += 1
            else:
                report.matched[m.strategy] += 1
                report.ambiguous += int(m.ambiguous)

    lane_names = {}
    if graph_lanes == "all":
        # A lane is named by the graphs whose events are on it in this trace (lane labels are
        # per graph). The default lane keeps its stream name even if an annotation asks for it
        # explicitly: it also holds every graphed event without a lane.
        events = [e for r in replays for e in r.events]
        graphs_on = lane_graphs(events, placements)
        for e in events:
            lane = placements[e.index].lane
            key = lane_key(e.device, lane)
            if key not in lane_names:
                on_lane = graphs_on.get(key)
                lane_names[key] = (lane_name(lane, annotations, on_lane) if on_lane and lane != DEFAULT_GRAPH_LANE
                                   else f"stream {lane}")
    return LaneLayout(placements=placements, lane_names=dict(sorted(lane_names.items())), report=report,
                      graph_lanes=graph_lanes,
                      ranges=project(replays, matches, replay_graph, replay_index, annotations) if projection else [])


def _majority_graph(found: Dict[int, Match]) -> Optional[int]:
    if not found:
        return None
    return Counter(m.node.graph_id for m in found.values()).most_common(1)[0][0]


def _replay_indices(replays: List[Replay], replay_graph: Dict[int, Optional[int]]) -> Dict[int, int]:
    """replay correlation -> 0-based index among the replays of the same graph (launch order)."""
    counters: Dict[int, int] = {}
    out: Dict[int, int] = {}
    for r in replays:
        g = replay_graph.get(r.correlation)
        if g is None:
            continue
        out[r.correlation] = counters.get(g, 0)
        counters[g] = out[r.correlation] + 1
    return out


__all__ = ["join", "DEFAULT_GRAPH_LANE"]
