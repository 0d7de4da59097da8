"""The busy-time shortcut of graph_ann.lanes / graph_ann.replays: when it applies and when not.

A lane whose work lies on one track, at one depth, on a track where no slice outlives its
parent ("flat", see ``_graph_ann_track_name.laminar``) gets its busy time as the sum of its
durations, without the window pass; any other lane gets the union. These cases build the
traces where the shortcut must not apply (a kernel nested in a kernel on one track; a
track where ill-nested begin / end and complete events make two same-depth kernels
overlap) and one where it applies under a parent (kernels at depth 1 under an
annotation), and compare busy time, idle gaps and replay busy time with unions computed
in Python from the events written here.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

from support.engine_support import requires_portable
from perfetto_graph_ann.join.model import LaneLayout
from perfetto_graph_ann.query import metrics
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.pipeline.convert import convert

pytestmark = requires_portable

Interval = Tuple[int, int]


def _union(intervals: List[Interval]) -> List[Interval]:
    out: List[Interval] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _kernel(name: str, ts_us: int, dur_us: int, stream: int, corr: int, ph: str = "X") -> Dict[str, Any]:
    ev = {"ph": ph, "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts_us,
          "args": {"device": 0, "stream": stream, "correlation": corr}}
    if ph == "X":
        ev["dur"] = dur_us
    return ev


def _doc(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "gpu"}},
            {"name": "process_name", "ph": "M", "ts": 0, "pid": 1, "tid": 1, "args": {"name": "cpu"}}]
    return {"schemaVersion": 1, "traceEvents": meta + events}


def _graph_launch(ts_us: int, corr: int) -> Dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": ts_us,
            "dur": 2, "args": {"correlation": corr}}


def _nested_and_annotated() -> Tuple[Dict[str, Any], Dict[int, List[Interval]]]:
    """Stream 7: kernels, one nested in another (same track, depths 0 and 1); stream 9:
    kernels under a gpu_user_annotation (all at depth 1: the shortcut applies). All in one
    graph replay (correlation 5)."""
    ev = [_graph_launch(90, 5),
          _kernel("outer", 100, 50, 7, 5), _kernel("inner", 110, 20, 7, 5), _kernel("after", 170, 10, 7, 5),
          {"ph": "X", "cat": "gpu_user_annotation", "name": "block", "pid": 0, "tid": 9, "ts": 95, "dur": 200,
           "args": {"device": 0, "stream": 9}},
          _kernel("a", 100, 30, 9, 5), _kernel("b", 140, 30, 9, 5), _kernel("c", 180, 40, 9, 5)]
    lanes = {7: [(100_000, 150_000), (110_000, 130_000), (170_000, 180_000)],
             9: [(100_000, 130_000), (140_000, 170_000), (180_000, 220_000)]}
    return _doc(ev), lanes


def _ill_nested() -> Tuple[Dict[str, Any], Dict[int, List[Interval]]]:
    """Stream 7: an annotation as begin / end events ending inside a complete kernel, then a
    second kernel: the trace processor puts both kernels at depth 1 although they overlap
    (the first kernel outlives its parent)."""
    ev = [_graph_launch(90, 5),
          {"ph": "B", "cat": "gpu_user_annotation", "name": "scope", "pid": 0, "tid": 7, "ts": 100,
           "args": {"device": 0, "stream": 7}},
          _kernel("k1", 110, 90, 7, 5),
          {"ph": "E", "cat": "gpu_user_annotation", "name": "scope", "pid": 0, "tid": 7, "ts": 150},
          _kernel("k2", 160, 20, 7, 5)]
    return _doc(ev), {7: [(110_000, 200_000), (160_000, 180_000)]}


def _check(session, lanes: Dict[int, List[Interval]]) -> None:
    got = metrics.lane_summary(session).set_index("lane_id")
    idle = metrics.lane_idle(session).set_index("lane_id")
    gaps = metrics.lane_gaps(session)
    assert set(got.index.astype(int)) == set(lanes)
    for lane, intervals in lanes.items():
        u = _union(intervals)
        busy = sum(e - s for s, e in u)
        assert int(got.loc[lane, "busy_dur"]) == busy, lane
        assert int(idle.loc[lane, "busy_dur"]) == busy, lane
        want_gaps = [(u[i][1], u[i + 1][0] - u[i][1]) for i in range(len(u) - 1) if u[i + 1][0] > u[i][1]]
        mine = gaps[gaps["lane_id"].astype(int) == lane]
        assert sorted(zip(mine["ts"].astype(int), mine["dur"].astype(int))) == want_gaps, lane
    # one replay holding all the work: its busy time is the union over all lanes
    replay = metrics.replays(session)
    assert len(replay) == 1
    every = [i for intervals in lanes.values() for i in intervals]
    assert int(replay["busy_dur"].iloc[0]) == sum(e - s for s, e in _union(every))
    per_lane = metrics.replay_lanes(session).set_index("lane_id")
    for lane, intervals in lanes.items():
        assert int(per_lane.loc[lane, "busy_dur"]) == sum(e - s for s, e in _union(intervals)), lane


def _flags(session) -> Dict[int, Tuple[int, int, int]]:
    """Per lane: (tracks, distinct depths, laminar) of its work, read from the trace."""
    rows = session.query(
        "INCLUDE PERFETTO MODULE graph_ann.gpu_work; "
        "SELECT w.lane_id, COUNT(DISTINCT w.track_id), COUNT(DISTINCT w.depth), MIN(n.laminar) "
        "FROM _graph_ann_work AS w JOIN _graph_ann_track_name AS n USING (track_id) GROUP BY w.lane_id").tuples()
    return {int(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in rows}


def test_nested_kernel_on_one_track_and_kernels_under_an_annotation(tmp_path: Path):
    doc, lanes = _nested_and_annotated()
    src = tmp_path / "nested.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "nested.pftrace"
    convert(src, out, layout=LaneLayout())
    with open_trace(out, engine="portable") as s:
        flags = _flags(s)
        assert flags[7] == (1, 2, 1)  # one track, two depths: the union is needed
        assert flags[9] == (1, 1, 1)  # one track, one depth (under the annotation): summed
        _check(s, lanes)


def test_ill_nested_track_is_not_summed(tmp_path: Path):
    doc, lanes = _ill_nested()
    src = tmp_path / "ill_nested.json"
    src.write_text(json.dumps(doc))
    with open_trace(src, engine="portable") as s:  # Chrome JSON loaded as is
        depths = s.query("SELECT name, depth, ts, dur FROM slice WHERE category = 'kernel' ORDER BY ts").tuples()
        # the case this test exists for: two overlapping kernels at one depth on one track
        assert [(n, d) for n, d, _, _ in depths] == [("k1", 1), ("k2", 1)]
        assert depths[0][2] + depths[0][3] > depths[1][2]
        assert _flags(s)[7] == (1, 1, 0)  # one track, one depth, but not laminar
        _check(s, lanes)
