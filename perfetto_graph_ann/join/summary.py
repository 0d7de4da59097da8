"""Before/after view of a join: GPU work per lane on the recorded streams and after placement.

The table the ``lanes`` command prints (like the tutorial's comparison of a graphed
trace with and without annotations), as a pandas DataFrame.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, Optional, Tuple

import pandas as pd

from ..read.model import KinetoTrace
from .model import LaneLayout, lane_key

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


def lane_table(trace: KinetoTrace, layout: LaneLayout, names: Optional[Dict[Tuple[int, int], str]] = None) -> pd.DataFrame:
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
    return pd.DataFrame(rows, columns=COLUMNS + (["annotated"] if annotated is not None else []))


def report_table(layout: LaneLayout) -> pd.DataFrame:
    """The join report as rows of (what, events)."""
    r = layout.report
    rows = [("GPU work events", r.total), ("launched by a graph", r.graphed)]
    rows += [(f"matched {s}", n) for s, n in r.matched.items()]
    rows += [("ambiguous (of matched)", r.ambiguous), ("unmatched", r.unmatched)]
    return pd.DataFrame(rows, columns=["join", "events"])
