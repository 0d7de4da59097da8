"""Before/after view of a join: GPU work per lane on the recorded streams and after placement.

The table the ``lanes`` command prints (like the tutorial's comparison of a graphed
trace with and without annotations), as a pandas DataFrame.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, Tuple

import pandas as pd

from ..read.model import KinetoTrace
from .model import LaneLayout

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
        dev = e.device
        counts[(dev if dev is not None else 0, lane if lane is not None else -1)] += 1
    return dict(counts)


def lane_table(trace: KinetoTrace, layout: LaneLayout) -> pd.DataFrame:
    """One row per (device, lane) seen before or after: its name and both counts, by lane id."""
    before = lane_counts(trace)
    after = lane_counts(trace, layout)
    rows = []
    for key in sorted(set(before) | set(after)):
        name = layout.lane_names.get(key, f"stream {key[1]}")
        rows.append((key[0], key[1], name, before.get(key, 0), after.get(key, 0)))
    return pd.DataFrame(rows, columns=COLUMNS)


def report_table(layout: LaneLayout) -> pd.DataFrame:
    """The join report as rows of (what, events)."""
    r = layout.report
    rows = [("GPU work events", r.total), ("launched by a graph", r.graphed)]
    rows += [(f"matched {s}", n) for s, n in r.matched.items()]
    rows += [("ambiguous (of matched)", r.ambiguous), ("unmatched", r.unmatched)]
    return pd.DataFrame(rows, columns=["join", "events"])
