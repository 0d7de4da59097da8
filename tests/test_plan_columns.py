"""The writer's plan in columns (issue 33): spans sorted with numpy as the tuples sort, the
flow binding's slice starts looked up by time, the records' table in the order the tuples
gave (a stable sort by time). The digest and two-pass tests check the bytes."""
from __future__ import annotations

from array import array
from functools import partial
from operator import itemgetter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import fixture_trace
from perfetto_graph_ann.read import kineto
from perfetto_graph_ann.write.perfetto import overlap
from perfetto_graph_ann.write.perfetto.config import WriteStats
from perfetto_graph_ann.write.perfetto.flows import SliceStarts
from perfetto_graph_ann.write.perfetto.plan import (BEGIN, COUNTER, END, _home_order, _sorted_spans, order_records,
                                                    plan_events)
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
    """Each time's slices in order (file order at equal times); none for None or a time without."""
    starts = SliceStarts(np.array([5, 7, 7, 9], np.int64), ["a", "b", "c", "d"])
    lo, hi = starts.bounds([7, 5, None, 8, 10, 9])
    assert [starts.events[a:b] for a, b in zip(lo, hi)] == [["b", "c"], ["a"], [], [], [], ["d"]]
    assert SliceStarts().bounds([1, None]) == ([0, 0], [0, 0]) and len(SliceStarts()) == 0


def test_records_are_the_stable_time_order_of_the_tracks_records():
    """``order_records``' table is what the tuples gave: each home's spans sorted as tuples,
    its tracks' records (``overlap.assign``) one after another in home order, then the
    counters', in one stable sort by time."""
    trace = kineto.read_trace(fixture_trace("seed_block_graph"))
    tracks, ref_tracks = TrackTable(trace), TrackTable(trace)
    plan = plan_events(trace, None, tracks, WriteStats())
    ref_plan = plan_events(trace, None, ref_tracks, WriteStats())
    records, per_track = order_records(plan, tracks, WriteStats())
    ref = []
    for home in sorted(ref_plan.by_home, key=_home_order):
        flat = ref_plan.by_home[home].tolist()
        spans = sorted(zip(flat[0::3], flat[1::3], flat[2::3]))
        ref.extend(r for t in overlap.assign(spans, partial(ref_tracks.track, home)) for r in t.records())
    ref.extend(ref_plan.counter_records)
    ref.sort(key=itemgetter(0))
    got = [(t, k, records.values[i] if k == COUNTER else i, u)
           for t, k, i, u in zip(*(c.tolist() for c in (records.ts, records.kind, records.key, records.uuid)))]
    assert ref and got == ref and len(ref) == sum(per_track.values())
    assert set(records.kind.tolist()) <= {BEGIN, END, COUNTER}
    one = overlap.TrackRecords(7)
    one.ts.extend([1, 2])
    one.codes.extend([5 * 2 + 1, 5 * 2])
    assert one.records() == [(1, 1, 5, 7), (2, 0, 5, 7)] and len(one) == 2
