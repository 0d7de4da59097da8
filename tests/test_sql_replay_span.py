"""The replays' span per device when the graph work that starts last is not the one that ends last.

``_graph_ann_replays_span`` reads the last end of a device's graph-launched work from the rows
that start within the longest duration of the last start (``_graph_ann_graphed_end``), and
every row where those end before the last start. Here a long graphed kernel starts first and
ends after everything else (so the last-starting kernel is not the last to end), eager work
runs after the replays (it must not widen the span), and a second device's last graphed
kernel has zero length. The span shows in ``graph_ann_lane.replay_utilization``; expected
values come from ``sql_expect.lane_table``, which computes the span in Python.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from support import sql_expect as X
from support.engine_support import requires_portable
from support.sql_synth import _Builder

from perfetto_graph_ann.query.session import open_trace

pytestmark = requires_portable


def _trace(path: Path):
    b = _Builder()
    c = b.next_corr()
    b.cpu("cudaGraphLaunch", 900, 50, c)
    b.gpu("long_gemm", 1_000, 50_000, 7, c)  # first to start, last to end
    for i in range(5):
        b.gpu(f"short_{i % 2}", 2_000 + 1_000 * i, 400, 8, c)
    c = b.next_corr()
    b.cpu("cudaLaunchKernel", 60_000, 10, c)
    b.gpu("eager_after", 70_000, 5_000, 7, c)  # not graphed: outside the replays' span
    # device 1: the last-starting graphed kernel has zero length
    c = b.next_corr()
    b.cpu("cudaGraphLaunch", 1_000, 50, c)
    i1 = b.gpu("d1_a", 2_000, 3_000, 9, c)
    i2 = b.gpu("d1_zero", 4_000, 0, 9, c)
    for i in (i1, i2):
        b.events[i]["pid"] = 1
        b.events[i]["args"]["device"] = 1
    b.events.append({"name": "process_labels", "ph": "M", "ts": 0, "pid": 1, "tid": 0, "args": {"labels": "GPU 1"}})
    return b.finish(path, 0, 80_000)


def test_replays_span_when_the_last_start_is_not_the_last_end(tmp_path: Path):
    path = tmp_path / "span.json"
    events = _trace(path)
    exp = X.lane_table(events)
    assert exp[(0, 7)]["replay_utilization"] is not None
    with open_trace(path, engine="portable") as s:
        s.query("INCLUDE PERFETTO MODULE graph_ann.lanes")
        span = {d: (ts, dur) for d, ts, dur in s.query("SELECT device, ts, dur FROM _graph_ann_replays_span").tuples()}
        got = {(d, lane): u for d, lane, u in s.query(
            "SELECT device, lane_id, replay_utilization FROM graph_ann_lane").tuples()}
    assert span == {0: (1_000, 50_000), 1: (2_000, 3_000)}  # ns
    assert set(got) == set(exp)
    for key, e in exp.items():
        assert got[key] == pytest.approx(e["replay_utilization"], rel=1e-12), key
        assert not math.isnan(got[key])
