"""Before/after view of a join: GPU work per lane on the recorded streams and after placement.

The table the ``lanes`` command prints (like the tutorial's comparison of a graphed
trace with and without annotations), as a pandas DataFrame.
"""
from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from ..read.model import KinetoTrace
from .lanes import GONE_GRAPHS_HINT
from .model import STRATEGIES, JoinReport, LaneLayout, lane_key

if TYPE_CHECKING:  # pandas is imported by the two tables alone: the summary lines every command prints need none
    import pandas as pd

__all__ = ["annotated_counts", "COLUMNS", "lane_counts", "lane_table", "report_table", "summary_line", "summary_lines",
           "warning_lines"]

COLUMNS = ["device", "lane", "name", "before", "after"]


def lane_counts(trace: KinetoTrace, layout: LaneLayout = None) -> Dict[Tuple[int, int], int]:
    """(device, lane) -> GPU work events drawn there; without ``layout``, the recorded streams."""
    placements = layout.placements if layout is not None else {}
    counts: Counter = Counter()
    for e in trace.events:
        if not e.is_gpu_work:
            continue
        p = placements.get(e.index)
        lane = p.lane if p is not None else e.stream
        counts[lane_key(e.device, lane if lane is not None else -1)] += 1
    return dict(counts)


def annotated_counts(trace: KinetoTrace, layout: LaneLayout) -> Dict[Tuple[int, int], int]:
    """(device, lane) -> events whose ``annotated_stream`` is that lane (graph_lanes="none")."""
    counts: Counter = Counter()
    for e in trace.events:
        p = layout.placements.get(e.index)
        if p is not None and "annotated_stream" in p.args:
            counts[lane_key(e.device, p.args["annotated_stream"])] += 1
    return dict(counts)


def lane_table(trace: KinetoTrace, layout: LaneLayout,
               names: Optional[Dict[Tuple[int, int], str]] = None) -> pd.DataFrame:
    """One row per (device, lane) seen before or after: its name and both counts, by lane id.

    With ``graph_lanes="none"`` the events stay put (after == before), so an extra
    ``annotated`` column counts the events that name each lane as their ``annotated_stream``.
    ``names`` adds names for lanes the layout does not name (e.g. annotated lanes in "none").
    """
    before = lane_counts(trace)
    after = lane_counts(trace, layout)
    annotated = annotated_counts(trace, layout) if layout.graph_lanes == "none" else None
    keys = set(before) | set(after) | set(annotated or ())
    rows = []
    for key in sorted(keys):
        name = layout.lane_names.get(key) or (names or {}).get(key) or f"stream {key[1]}"
        row = [key[0], key[1], name, before.get(key, 0), after.get(key, 0)]
        if annotated is not None:
            row.append(annotated.get(key, 0))
        rows.append(row)
    import pandas as pd

    return pd.DataFrame(rows, columns=COLUMNS + (["annotated"] if annotated is not None else []))


def report_table(layout: LaneLayout) -> pd.DataFrame:
    """The join report as rows of (what, events)."""
    r = layout.report
    rows = [("GPU work events", r.total), ("launched by a graph", r.graphed)]
    rows += [(f"matched {s}", n) for s, n in r.matched.items()]
    rows += [("ambiguous (of matched)", r.ambiguous), ("unmatched", r.unmatched)]
    import pandas as pd

    return pd.DataFrame(rows, columns=["join", "events"])


def _files(paths: List[str]) -> str:
    return ", ".join(os.path.basename(p) or p for p in paths)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary_line(report: JoinReport) -> str:
    """The join in one line, e.g. ``join: 70/70 GPU events of graph replays matched (70 calibrated)
    · 0 unmatched · annotations: seed_block_annotated.capture.json``."""
    files = f" · annotations: {_files(report.annotation_files)}" if report.annotation_files else ""
    if not report.graphed:
        return f"join: no GPU events launched by a graph in this trace ({report.total} GPU events){files}"
    matched = sum(report.matched.values())
    parts = ", ".join(f"{report.matched[s]} {s}" for s in STRATEGIES if report.matched.get(s))
    ambiguous = f" · {report.ambiguous} ambiguous" if report.ambiguous else ""
    return (f"join: {matched}/{report.graphed} GPU events of graph replays matched"
            f"{f' ({parts})' if parts else ''}{ambiguous} · {report.unmatched} unmatched{files}")


def warning_lines(report: JoinReport) -> List[str]:
    """What the user must know about a join besides its counts, one line each (without a
    ``warning:`` / ``note:`` prefix, which :func:`summary_lines` adds)."""
    out: List[Tuple[str, str]] = []
    for path, diffs in report.identity_overridden.items():
        out.append(("warning", f"{_files([path])} was captured by another process than the trace's "
                               f"({'; '.join(diffs)}); joined anyway (identity check overridden)"))
    if report.no_match_overridden:
        out.append(("warning", "the annotations match none of the trace's graph replays; joined anyway "
                               "(check overridden): no event is labelled"))
    for reason, n in sorted(report.unmatched_replays.items()):
        events = report.unmatched_replay_events.get(reason, 0)
        out.append(("warning", f"{_plural(n, 'graph replay')} ({_plural(events, 'GPU event')}) left unlabelled: "
                               f"{reason}"))
    for names, n in sorted(report.unidentified_replays.items()):
        events = report.unidentified_replay_events.get(names, 0)
        out.append(("warning", f"{_plural(n, 'graph replay')} ({_plural(events, 'GPU event')}) left unlabelled: "
                               f"the join could not tell which of several graphs replayed ({names}), and their "
                               "annotations differ"
                               + ("" if report.replay_record else "; annotations saved with a replay record "
                                  "(sidecar version 3) tell them apart")))
    for names, n in sorted(report.shared_label_replays.items()):
        out.append(("note", f"{_plural(n, 'graph replay')} labelled with the annotation every candidate graph "
                            f"gives it, without a graph id: the join could not tell which replayed ({names})"))
    if report.unannotated_replays:
        out.append(("note", f"{_plural(report.unannotated_replays, 'graph replay')} "
                            f"({_plural(report.unannotated_replay_events, 'GPU event')}) of graphs without "
                            f"annotations (replay record): left unlabelled ({GONE_GRAPHS_HINT})"))
    if report.module_origins:
        o = report.module_origins
        out.append(("note", "compiled code: " + ", ".join(
            f"{o.get(k, 0)} GPU events with {label}" for k, label in
            (("exact", "an exact module path"), ("common ancestor", "their modules' common ancestor"),
             ("unknown", "the compiled region's name only")))))
    for problem in report.replay_record_problems:
        out.append(("note", f"replay record: {problem}"))
    for graph, note in sorted(report.calibration_notes.items()):
        out.append(("warning", f"{graph} was matched structurally, without calibration: {note}"))
    for reason, n in sorted(report.unprojected_replays.items()):
        out.append(("note", f"{_plural(n, 'graph replay')} not drawn on the GPU timeline: {reason}"))
    for reason, n in sorted(report.unprojected_scopes.items()):
        out.append(("note", f"{_plural(n, 'scope instance')} not drawn on the GPU timeline: {reason}"))
    for reason, n in sorted(report.critical_paths.items()):
        if reason.startswith("not computed"):  # the critical path's refusals (join.critical_path)
            out.append(("note", f"{_plural(n, 'graph replay')}: critical path {reason}"))
    if report.edge_flows_note:
        out.append(("note", f"dependency flows: {report.edge_flows_note}"))
    if report.identity_missing:
        out.append(("note", f"{_files(report.identity_missing)}: no capture identity recorded (version-1 sidecar "
                            "or capture record), not checked against the trace"))
    return [f"{kind}: {text}" for kind, text in out]


def summary_lines(report: JoinReport) -> List[str]:
    """:func:`summary_line` then :func:`warning_lines`: what every joining command prints."""
    return [summary_line(report)] + warning_lines(report)
