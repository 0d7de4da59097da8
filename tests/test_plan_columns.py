"""The writer's plan in columns (issue 33): spans sorted with numpy as the tuples sort, the
flow binding's slice starts looked up as the dict of starts was, the records' table in the
order of a stable sort of the tuples by time."""
from __future__ import annotations

from array import array

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import fixture_trace
from perfetto_graph_ann.read import kineto
from perfetto_graph_ann.write.perfetto import overlap
from perfetto_graph_ann.write.perfetto.config import WriteStats
from perfetto_graph_ann.write.perfetto.flows import SliceStarts
from perfetto_graph_ann.write.perfetto.plan import BEGIN, COUNTER, END, _sorted_spans, order_records, plan_events
from perfetto_graph_ann.write.perfetto.tracks import TrackTable


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 6)), max_size=60))
def test_spans_sort_as_tuples(raw):
    """Starts, then longest first, then index: equal starts (ties) and full ties included."""
    spans = [(ts, -dur, 3 * i) for i, (ts, dur) in enumerate(raw)]
    flat = array("q")
    for s in spans:
        flat.extend(s)
    assert list(_sorted_spans(flat)) == sorted(spans)


def test_slice_starts_bounds():
    starts = SliceStarts(np.array([5, 7, 7, 9], np.int64), ["a", "b", "c", "d"])
    lo, hi = starts.bounds([7, 5, None, 8, 10, 9])
    assert [starts.events[a:b] for a, b in zip(lo, hi)] == [["b", "c"], ["a"], [], [], [], ["d"]]
    assert SliceStarts().bounds([1, None]) == ([0, 0], [0, 0]) and len(SliceStarts()) == 0


def test_records_are_the_stable_time_order_of_the_tracks_records():
    trace = kineto.read_trace(fixture_trace("seed_block_graph"))
    tracks = TrackTable(trace)
    plan = plan_events(trace, None, tracks, WriteStats())
    homes = {h: list(_sorted_spans(a)) for h, a in plan.by_home.items()}
    records, per_track = order_records(plan, tracks, WriteStats())
    ts, kind, key, uuid = (c.tolist() for c in (records.ts, records.kind, records.key, records.uuid))
    assert ts == sorted(ts) and len(records) == sum(per_track.values()) == sum(2 * len(s) for s in homes.values()) \
        + sum(1 for k in kind if k == COUNTER)
    assert set(kind) <= {BEGIN, END, COUNTER}
    # every slice begins and ends once, on one track, in nesting order per track
    seen = {}
    for t, k, i, u in zip(ts, kind, key, uuid):
        if k != COUNTER:
            seen.setdefault((u, i), []).append((k, t))
    for (u, i), marks in seen.items():
        assert [k for k, _ in marks] == [BEGIN, END] and marks[0][1] <= marks[1][1]
    assert sorted(i for _, i in seen) == sorted(s[2] for spans in homes.values() for s in spans)
    # per track, the records in the order overlap.assign gave them
    one = overlap.TrackRecords(7)
    one.ts.extend([1, 2])
    one.codes.extend([5 * 2 + 1, 5 * 2])
    assert one.records() == [(1, 1, 5, 7), (2, 0, 5, 7)] and len(one) == 2
