"""graph_ann.replays: a replay's busy time as its span less its idle gaps, and the guard.

``_graph_ann_replay_busy`` takes a replay's busy time on a device as its span there less
the gaps between its merged intervals (one window pass, only the gap rows summed) when no
graphed work has a negative duration and every (replay, lane) pair's work lies on one
device; otherwise it sums the union piece by piece. Each case here builds a Chrome JSON
trace, checks which way the module went (``_graph_ann_replay_device.by_gaps``) and compares
every replay's busy time with a union computed in Python from the events written here.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from support.engine_support import requires_portable
from perfetto_graph_ann.query.session import open_trace

pytestmark = requires_portable

Interval = Tuple[int, int]


def _union_length(intervals: List[Interval]) -> int:
    """Length of the union of ``intervals`` (empty and negative ones add nothing)."""
    total, end = 0, None
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


def _k(ts: int, dur: int, stream: int, corr: int, device: int = 0, ph: str = "X") -> Dict[str, Any]:
    ev = {"ph": ph, "cat": "kernel", "name": f"k{corr}_{ts}", "pid": 10 + device, "tid": stream, "ts": ts,
          "args": {"device": device, "stream": stream, "correlation": corr}}
    if ph == "X":
        ev["dur"] = dur
    return ev


def _launch(ts: int, corr: int) -> Dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": ts, "dur": 2,
            "args": {"correlation": corr}}


#: case -> (kernels, whether the gaps give the busy time, {correlation: intervals in us
#: counted for that replay's busy time}).
CASES: Dict[str, Tuple[List[Dict[str, Any]], bool, Dict[int, List[Interval]]]] = {
    # two replays, each on two lanes that overlap, with gaps, a zero-length kernel inside a
    # gap and one touching the end of earlier work; replay 6 starts while replay 5 runs
    "gaps": ([_k(100, 30, 7, 5), _k(120, 40, 9, 5), _k(180, 0, 7, 5), _k(200, 10, 9, 5), _k(210, 5, 7, 5),
              _k(150, 20, 11, 6), _k(400, 10, 11, 6), _k(405, 20, 13, 6)],
             True, {5: [(100, 130), (120, 160), (180, 180), (200, 210), (210, 215)],
                    6: [(150, 170), (400, 410), (405, 425)]}),
    # an unfinished kernel (no end: duration -1) in replay 5: the pieces are summed
    "negative_duration": ([_k(100, 30, 7, 5), _k(150, 20, 9, 5), _k(300, 0, 7, 5, ph="B"), _k(120, 5, 9, 6)],
                          False, {5: [(100, 130), (150, 170)], 6: [(120, 125)]}),
    # replay 5's lane-7 work on device 0 and on device 1: as before, its busy time is the
    # union of its work on its smallest device
    "pair_on_two_devices": ([_k(100, 30, 7, 5), _k(140, 20, 9, 5), _k(150, 40, 7, 5, device=1)],
                            False, {5: [(100, 130), (140, 160)]}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_replay_busy_time(tmp_path: Path, case: str):
    kernels, by_gaps, busy = CASES[case]
    meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": p, "tid": p, "args": {"name": n}}
            for p, n in ((1, "cpu"), (10, "gpu0"), (11, "gpu1"))]
    launches = [_launch(50 - 5 * c, c) for c in busy]  # disjoint on one thread
    src = tmp_path / f"{case}.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": meta + launches + kernels}))
    with open_trace(src, engine="portable") as s:
        rows = s.query("INCLUDE PERFETTO MODULE graph_ann.replays; "
                       "SELECT device, by_gaps FROM _graph_ann_replay_device").tuples()
        assert [(int(d), bool(g)) for d, g in rows] == [(0, by_gaps)]
        got = dict(s.query("SELECT correlation, busy_dur FROM graph_ann_replay").tuples())
    assert got == {c: 1000 * _union_length(iv) for c, iv in busy.items()}
