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

from collections import Counter
from typing import Dict, List, Optional, Sequence

from ..annotations.model import AnnotationSet
from ..errors import AnnotationMismatchError
from ..read.model import KinetoTrace
from . import identity
from .calibrated import match_calibrated
from .exact import match_exact
from .lanes import (PLACEMENT_KEYS, check_default_stream, decide_graph_lanes, has_annotated_nodes,  # noqa: F401
                    lane_graphs, lane_name, placement)
from .match import Match
from .projection import project
from .model import DEFAULT_GRAPH_LANE, JoinReport, LaneLayout, lane_key
from .replays import Replay, find_replays
from .structural import match_structural


IN_MEMORY = "(annotations in memory)"


def _name(s: AnnotationSet) -> str:
    return s.source or IN_MEMORY


def _check_identities(trace: KinetoTrace, sources: Sequence[AnnotationSet], force: bool, report: JoinReport) -> None:
    for src in sources:
        if not src.graphs:
            continue
        name = _name(src)
        if src.capture is None:
            report.identity_missing.append(name)
            continue
        diffs = identity.differences(src.capture, trace)
        if not diffs:
            report.identity_checked[name] = identity.compared_fields(src.capture, trace)
        elif force:
            report.identity_overridden[name] = diffs
        else:
            raise AnnotationMismatchError(
                src.source, trace.path,
                f"these annotations were captured by another process than the one that recorded {trace.path} "
                f"({'; '.join(diffs)}): their graph ids name other graphs. Pass --force-annotations (CLI) "
                "or force=True (Python) to join them anyway", diffs)


def _refuse_no_match(trace: KinetoTrace, annotations: AnnotationSet, sources: Sequence[AnnotationSet],
                     replays: List[Replay], force: bool, report: JoinReport) -> None:
    """Annotations read from a file, or holding graphs, that match none of the trace's graph
    replays belong to another run (or were saved before the capture). An in-memory set without
    graphs (nothing captured in this process) labels nothing and is not an error."""
    from_file = any(s.source for s in sources)
    if not (annotations.graphs or from_file) or not report.graphed or sum(report.matched.values()):
        return
    if force:
        report.no_match_overridden = True
        return
    why = "; ".join(f"{n} replay{'s' if n != 1 else ''}: {r}" for r, n in sorted(report.unmatched_replays.items()))
    files = ", ".join(_name(s) for s in sources if s.graphs or s.source) or _name(annotations)
    raise AnnotationMismatchError(
        files, trace.path,
        f"these annotations match none of the {len(replays)} graph replays ({report.graphed} GPU events) in "
        f"{trace.path} ({why}): they are from another run or program. Pass --force-annotations (CLI) or "
        "force=True (Python) to join them anyway", tuple(report.unmatched_replays))


def join(trace: KinetoTrace, annotations: AnnotationSet, graph_lanes: Optional[str] = "none",
         default_stream: int = DEFAULT_GRAPH_LANE, force: bool = False,
         sources: Optional[Sequence[AnnotationSet]] = None, projection: bool = True) -> LaneLayout:
    """Place every replayed GPU work event of ``trace`` on a lane, with its annotation as args.

    ``graph_lanes`` as in torch 2.15's ``export_chrome_trace``: ``"none"`` (its default)
    keeps the recorded streams and adds ``annotated_stream``; ``"all"`` moves graphed events
    to their annotated lane, else to ``default_stream``, and like torch refuses annotations
    in which no node carries a field (it would only pile every graphed event onto one
    lane); None: ``"all"`` where a node is annotated, else ``"none"`` (the CLI's default).
    Both are decided by :func:`~.lanes.decide_graph_lanes`; a ``default_stream`` that is not
    a lane id, or is a lane an annotation asks for, is refused (:func:`~.lanes.check_default_stream`):
    :class:`~perfetto_graph_ann.errors.LaneOptionError`, a ``ValueError``. Events not launched by a graph are left alone (no placement). ``projection``:
    also the replay and scope ranges the Perfetto writer draws under each GPU
    (``LaneLayout.ranges``).

    Raises :class:`~perfetto_graph_ann.errors.AnnotationMismatchError` when an annotation
    file's capture identity disagrees with the trace, or when annotations with graphs match
    none of the trace's graph replays; ``force=True`` joins anyway and the report says what
    was overridden. ``sources``: the sets ``annotations`` was merged from (one per file), so
    each file's identity is checked; default ``[annotations]``.
    """
    sources = list(sources) if sources is not None else [annotations]
    files = [s.source for s in sources if s.source] or None
    # the one rule for the lane options (join/lanes.py): every entry point comes through here
    graph_lanes = decide_graph_lanes(graph_lanes, annotations, files, trace.path)
    default_stream = check_default_stream(default_stream, annotations, files, trace.path)
    report = JoinReport(total=sum(1 for e in trace.events if e.is_gpu_work))
    report.annotation_files = [s.source for s in sources if s.source]
    _check_identities(trace, sources, force, report)
    replays = find_replays(trace)
    nodes_by_key = annotations.nodes_by_key()
    graphs = annotations.graphs
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
            st, g, why = match_structural(r, graphs, pending, only_graph=chosen, used_keys=used)
            found.update(st)
            chosen = chosen if chosen is not None else g
            if why:
                report.unmatched_replays[why] = report.unmatched_replays.get(why, 0) + 1
                report.unmatched_replay_events[why] = report.unmatched_replay_events.get(why, 0) + len(pending)
            elif st:
                gr = annotations.graph(g) if g is not None else None
                if gr is not None and gr.calibration_note:
                    report.calibration_notes[gr.display_name] = gr.calibration_note
        matches.update(found)
        replay_graph[r.correlation] = chosen

    replay_index = _replay_indices(replays, replay_graph)
    placements = {}
    cache: Dict = {}
    for r in replays:
        for e in r.events:
            m = matches.get(e.index)
            placements[e.index] = placement(e, m, replay_index.get(r.correlation) if m else None, graph_lanes, cache,
                                           default_stream)
            if m is None:
                report.unmatched += 1
            else:
                report.matched[m.strategy] += 1
                report.ambiguous += int(m.ambiguous)
    _refuse_no_match(trace, annotations, sources, replays, force, report)

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
                lane_names[key] = (lane_name(lane, annotations, on_lane) if on_lane and lane != default_stream
                                   else f"stream {lane}")
    arg_keys = PLACEMENT_KEYS.union(*(base for _, base in cache.values()))
    return LaneLayout(placements=placements, lane_names=dict(sorted(lane_names.items())), report=report,
                      graph_lanes=graph_lanes, arg_keys=arg_keys,
                      ranges=project(replays, matches, replay_graph, replay_index, annotations, report)
                      if projection else [])


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
