"""The two-layer busy-time shortcut of graph_ann.lanes / graph_ann.replays and its guard.

A lane that is not flat gets its busy time from at most two "layers" (its depth-0 work
on each of its one or two tracks, intersected by a SPAN_JOIN) when ``_graph_ann_lane_layers``
allows it: no track between its first and last, no negative duration, every slice on
those tracks its own work, laminar tracks. Each case here puts a lane's work on two or
three threads of a Chrome JSON trace (a track each), one case where the shortcut applies
(nested kernels on one track, overlapping work across the two) and one per check that
must stop it, built so that the shortcut would give a wrong busy time without that check.
Busy time, idle gaps and replay busy time are compared with unions computed in Python
from the events written here, and the path taken is asserted from the module's tables.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from support.engine_support import requires_portable
from support.sql_expect import length
from perfetto_graph_ann.query import metrics
from perfetto_graph_ann.query.session import open_trace

pytestmark = requires_portable

Interval = Tuple[int, int]
CORR = 5  # one graph replay holds all the work


def _gaps(intervals: List[Interval]) -> List[Tuple[int, int]]:
    out, end = [], None
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if end is not None and s > end:
            out.append((end, s - end))
        end = e if end is None else max(end, e)
    return out


def _ev(name: str, ph: str, tid: int, ts: int, dur: int = 0, lane: int = 7) -> Dict[str, Any]:
    ev = {"ph": ph, "cat": "kernel", "name": name, "pid": 0, "tid": tid, "ts": ts,
          "args": {"device": 0, "stream": lane, "correlation": CORR}}
    if ph == "X":
        ev["dur"] = dur
    return ev


def _x(name: str, tid: int, ts: int, dur: int, lane: int = 7) -> Dict[str, Any]:
    return _ev(name, "X", tid, ts, dur, lane)


#: case -> (events, {lane: finished work intervals in us}, whether lane 7 takes the shortcut)
CASES: Dict[str, Tuple[List[Dict[str, Any]], Dict[int, List[Interval]], bool]] = {
    # thread 100: a kernel nested in a kernel (depths 0 and 1); thread 101 overlaps both
    "two_tracks": ([_x("outer", 100, 100, 50), _x("inner", 100, 110, 20), _x("late", 100, 200, 30),
                    _x("b1", 101, 140, 30), _x("b2", 101, 240, 5)],
                   {7: [(100, 150), (110, 130), (200, 230), (140, 170), (240, 245)]}, True),
    # thread 100 also holds lane 8's work, with lane 7's work nested in it: lane 7's only
    # work there is at depth 1 (the layer would miss it)
    "foreign_parent": ([_x("l8", 100, 100, 100, lane=8), _x("inner", 100, 120, 30), _x("b1", 101, 300, 10)],
                       {7: [(120, 150), (300, 310)], 8: [(100, 200)]}, False),
    # lane 7 on three threads (the layers would miss the middle one)
    "three_tracks": ([_x("a", 100, 100, 10), _x("m", 101, 120, 40), _x("c", 102, 130, 10)],
                     {7: [(100, 110), (120, 160), (130, 140)]}, False),
    # thread 100: an unfinished kernel (dur -1) with a finished one nested in it (the layer
    # holds depth-0 work with a positive duration only)
    "negative_dur": ([_ev("open", "B", 100, 100), _x("inner", 100, 110, 20), _x("b1", 101, 200, 10)],
                     {7: [(110, 130), (200, 210)]}, False),
    # thread 100: a begin / end kernel ending inside a complete kernel nested in it, then a
    # second complete kernel: both at depth 1, overlapping (not laminar); the depth-0
    # layer would hold the begin / end kernel only
    "ill_nested": ([_ev("be", "B", 100, 100), _x("k1", 100, 110, 90), _ev("be", "E", 100, 150),
                    _x("k2", 100, 160, 20), _x("b1", 101, 300, 10)],
                   {7: [(100, 150), (110, 200), (160, 180), (300, 310)]}, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_layered_busy_time(tmp_path: Path, case: str):
    events, lanes, layered = CASES[case]
    meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "gpu"}},
            {"name": "process_name", "ph": "M", "ts": 0, "pid": 1, "tid": 1, "args": {"name": "cpu"}}]
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": 90,
              "dur": 2, "args": {"correlation": CORR}}
    src = tmp_path / f"{case}.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": meta + [launch] + events}))
    ns = {lane: [(s * 1000, e * 1000) for s, e in iv] for lane, iv in lanes.items()}
    with open_trace(src, engine="portable") as s:  # Chrome JSON loaded as is: a track per thread
        tracks = s.query("INCLUDE PERFETTO MODULE graph_ann.lanes; "
                         "SELECT COUNT(DISTINCT track_id) FROM _graph_ann_work WHERE lane_id = 7").tuples()[0][0]
        assert tracks == (3 if case == "three_tracks" else 2)
        taken = s.query("SELECT COUNT(*) FROM _graph_ann_lane_layered WHERE lane_id = 7").tuples()[0][0]
        assert taken == int(layered)
        got = metrics.lane_summary(s).set_index("lane_id")
        idle = metrics.lane_idle(s).set_index("lane_id")
        gaps = metrics.lane_gaps(s)
        replay = metrics.replays(s)
        per_lane = metrics.replay_lanes(s).set_index("lane_id")
    assert set(got.index.astype(int)) == set(ns)
    for lane, iv in ns.items():
        busy = length(iv)
        assert int(got.loc[lane, "busy_dur"]) == busy, lane
        assert int(idle.loc[lane, "busy_dur"]) == busy, lane
        assert int(per_lane.loc[lane, "busy_dur"]) == busy, lane
        mine = gaps[gaps["lane_id"].astype(int) == lane]
        assert sorted(zip(mine["ts"].astype(int), mine["dur"].astype(int))) == _gaps(iv), lane
    assert len(replay) == 1
    assert int(replay["busy_dur"].iloc[0]) == length([i for iv in ns.values() for i in iv])


def _k(name: str, tid: int, ts: int, dur: int, corr: int, device: int = 0, pid: int = 0) -> Dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": {"device": device, "stream": 7, "correlation": corr}}


def _launch(name: str, ts: int, corr: int) -> Dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 2,
            "args": {"correlation": corr}}


#: case -> (events, replays' correlations, {(corr, device): lane 7 work intervals in us counted
#: for that replay's busy time on lane 7}, how graph_ann.replays gets lane 7's busy time).
#: All work is on lane 7, on threads 100 and 101 (two tracks).
REPLAY_CASES: Dict[str, Tuple[List[Dict[str, Any]], List[int], Dict[int, List[Interval]], str]] = {
    # one replay, nested kernels on one track, the other track overlapping: layered
    "layered": ([_k("outer", 100, 100, 50, 5), _k("inner", 100, 110, 20, 5), _k("b", 101, 140, 30, 5)],
                [5], {5: [(100, 150), (110, 130), (140, 170)]}, "layered"),
    # two replays whose work on the lane overlaps in time (replay 6's kernel nested in
    # replay 5's): replay 6 has no depth-0 work on thread 100
    "replays_overlap": ([_k("r5", 100, 100, 100, 5), _k("r6", 100, 120, 30, 6), _k("r6b", 101, 300, 10, 6)],
                        [5, 6], {5: [(100, 200)], 6: [(120, 150), (300, 310)]}, "union"),
    # a kernel of an eager launch (not a replay) with the replay's kernel nested in it
    "eager_parent": ([_k("eager", 100, 100, 100, 9), _k("inner", 100, 120, 30, 5), _k("b", 101, 300, 10, 5)],
                     [5], {5: [(120, 150), (300, 310)]}, "union"),
    # the replay's lane-7 work on device 0 and on device 1 (another process): the pair is
    # listed under device 0 and, as before, its busy time is the union of device 0's work
    "two_devices": ([_k("d0", 100, 100, 30, 5), _k("d1", 7, 110, 40, 5, device=1, pid=2)],
                    [5], {5: [(100, 130)]}, "union"),
}


@pytest.mark.parametrize("case", sorted(REPLAY_CASES))
def test_replay_lane_busy_time(tmp_path: Path, case: str):
    events, replays, busy, path = REPLAY_CASES[case]
    meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": p, "tid": p, "args": {"name": n}}
            for p, n in ((0, "gpu"), (1, "cpu"), (2, "gpu1"))]
    launches = [_launch("cudaGraphLaunch", 90 - 5 * c, c) for c in replays]  # disjoint on one thread
    launches += [_launch("cudaLaunchKernel", 80, 9)]
    src = tmp_path / f"{case}.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": meta + launches + events}))
    with open_trace(src, engine="portable") as s:
        rows = s.query(
            "INCLUDE PERFETTO MODULE graph_ann.replays; "
            "SELECT f.flat, EXISTS (SELECT 1 FROM _graph_ann_replay_lane_layered AS k "
            "  WHERE k.device = f.device AND k.lane_id = f.lane_id) "
            "FROM _graph_ann_replay_lane_flat AS f WHERE f.device = 0 AND f.lane_id = 7").tuples()
        assert [tuple(map(int, r)) for r in rows] == [{"flat": (1, 0), "layered": (0, 1), "union": (0, 0)}[path]]
        per_lane = s.query("SELECT correlation, busy_dur FROM graph_ann_replay_lane WHERE lane_id = 7").tuples()
        replay = s.query("SELECT correlation, busy_dur FROM graph_ann_replay").tuples()
    want = {c: length([(a * 1000, b * 1000) for a, b in iv]) for c, iv in busy.items()}
    assert dict(per_lane) == want
    if case != "two_devices":  # there the replay's busy time spans both devices' work
        assert dict(replay) == want
