"""graph_ann.lane_idle's lane spans when some work has a non-positive duration.

``_graph_ann_lane_span`` takes a lane's span of positive work from its whole span when
all its durations are positive, and reads the positive work again otherwise: with ``=``
for a lane with a device and a lane id, with ``IS`` for work without a lane (no
``stream`` argument). This case has zero-length kernels at both ends of a lane and at the
end of the lane-less work, so both fallbacks run, and compares span, busy and idle time
and the gaps with values computed in Python from the events written here.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from support.engine_support import requires_portable
from perfetto_graph_ann.query.session import open_trace

pytestmark = requires_portable


def _kernel(name: str, ts_us: int, dur_us: int, tid: int, stream: Optional[int]) -> Dict[str, Any]:
    args: Dict[str, Any] = {"device": 0, "correlation": 1000 + ts_us}
    if stream is not None:
        args["stream"] = stream
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": tid, "ts": ts_us, "dur": dur_us,
            "args": args}


#: (name, ts us, dur us, stream or None): zero-length kernels first and last on stream 7,
#: and last in the work without a stream.
KERNELS: List[Tuple[str, int, int, Optional[int]]] = [
    ("z0", 100, 0, 7), ("k1", 110, 20, 7), ("k2", 140, 10, 7), ("z1", 160, 0, 7),
    ("n1", 200, 30, None), ("n2", 240, 10, None), ("z2", 260, 0, None),
]


def _expected() -> Dict[Optional[int], Dict[str, int]]:
    """Per lane: span, busy, idle, gap count, in ns, straight from KERNELS. Work without a
    lane gets no gaps (gpu_work.sql: the per-lane functions select with `=`), so its busy
    time is the span of its positive work."""
    out: Dict[Optional[int], Dict[str, int]] = {}
    for lane in {k[3] for k in KERNELS}:
        work = [(ts * 1000, (ts + dur) * 1000) for _, ts, dur, s in KERNELS if s == lane]
        positive = sorted(w for w in work if w[1] > w[0])
        span = max(e for _, e in work) - min(s for s, _ in work)
        gaps: List[int] = []
        if lane is not None:
            end = positive[0][1]
            for s, e in positive[1:]:
                if s > end:
                    gaps.append(s - end)
                end = max(end, e)
        busy = positive[-1][1] - positive[0][0] - sum(gaps)
        out[lane] = {"span_dur": span, "busy_dur": busy, "idle_dur": span - busy, "gap_count": len(gaps)}
    return out


def test_lane_spans_with_zero_length_work(tmp_path: Path):
    meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "gpu"}}]
    events = [_kernel(n, ts, dur, 8 if s is None else s, s) for n, ts, dur, s in KERNELS]
    src = tmp_path / "zero_length.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": meta + events}))
    want = _expected()
    # the case this test exists for: each lane's positive work spans less than all its work
    for lane in want:
        positive = [(ts, ts + dur) for _, ts, dur, s in KERNELS if s == lane and dur > 0]
        assert max(e for _, e in positive) - min(b for b, _ in positive) < want[lane]["span_dur"] // 1000
    with open_trace(src, engine="portable") as s:  # Chrome JSON loaded as is: args.*, no stream -> NULL lane
        n = s.query("SELECT COUNT(*) FROM slice WHERE category = 'kernel'").tuples()[0][0]
        assert n == len(KERNELS)  # the importer kept the zero-length kernels
        rows = s.query("INCLUDE PERFETTO MODULE graph_ann.lane_idle; "
                       "SELECT lane_id, span_dur, busy_dur, idle_dur, gap_count FROM graph_ann_lane_idle").tuples()
    got = {r[0]: {"span_dur": r[1], "busy_dur": r[2], "idle_dur": r[3], "gap_count": r[4]} for r in rows}
    assert got == want


def test_lane_statistics_of_work_without_a_lane(tmp_path: Path):
    """graph_ann.lanes reads a lane's last start, shortest duration, tracks and depths with
    `=` (natively filtered): lane 7's row (zero-length work first and last) is compared with
    the statistics of KERNELS computed here. Work without a lane (NULL lane id) has no row
    (the lane's percentiles are joined with `=`), as before that change."""
    meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "gpu"}}]
    events = [_kernel(n, ts, dur, 8 if s is None else s, s) for n, ts, dur, s in KERNELS]
    src = tmp_path / "no_lane.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": meta + events}))
    cols = ("work_count", "total_dur", "min_dur", "max_dur", "first_ts", "last_ts", "end_ts", "busy_dur")
    want = {}
    for lane in (7,):
        work = [(ts * 1000, dur * 1000) for _, ts, dur, s in KERNELS if s == lane]
        durs = [d for _, d in work]
        # one track, one depth, disjoint work: busy = the sum of durations
        want[lane] = (len(work), sum(durs), min(durs), max(durs), min(t for t, _ in work),
                      max(t for t, _ in work), max(t + d for t, d in work), sum(durs))
    with open_trace(src, engine="portable") as s:
        rows = s.query("INCLUDE PERFETTO MODULE graph_ann.lanes; "
                       f"SELECT lane_id, {', '.join(cols)} FROM graph_ann_lane").tuples()
    assert {r[0]: tuple(r[1:]) for r in rows} == want


def test_top_kernels_of_work_without_a_lane(tmp_path: Path):
    """graph_ann_lane_top_kernels keeps work without a lane (NULL lane id) as its own group,
    ranked by total duration, with each kernel's share of that group; lane 7's rows as usual."""
    meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "gpu"}}]
    events = [_kernel(n, ts, dur, 8 if s is None else s, s) for n, ts, dur, s in KERNELS]
    src = tmp_path / "no_lane.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": meta + events}))
    want = {}
    for lane in {k[3] for k in KERNELS}:
        work = sorted(((-dur, name) for name, _, dur, s in KERNELS if s == lane))
        total = -sum(d for d, _ in work)
        for rank, (neg, name) in enumerate(work, 1):
            want[(lane, name)] = (rank, 1, -neg * 1000, -neg / total)
    with open_trace(src, engine="portable") as s:
        rows = s.query("INCLUDE PERFETTO MODULE graph_ann.lanes; "
                       "SELECT lane_id, name, rank, count, total_dur, share FROM graph_ann_lane_top_kernels").tuples()
    assert {(r[0], r[1]): tuple(r[2:]) for r in rows} == want
