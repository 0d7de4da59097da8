"""overlap.assign (the writer's nesting-track policy) on random spans, against a plain reference;
overlap.assign_forest (the GPU projection's) on random forests of ranges.

The reference below is the policy as docs/design.md states it, written without shortcuts:
slices in (start, longest first, key) order; each goes on the first track whose open slices
all enclose it (closed ones popped as the track is visited), else on a new track.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from perfetto_graph_ann.write.perfetto.overlap import assign, assign_forest


def _reference(spans, track_uuid):
    tracks = []  # [open stack, records, uuid]
    for ts, neg_dur, key in spans:
        end = ts - neg_dur
        for stack, rec, uuid in tracks:
            while stack and stack[-1][0] <= ts:
                e, k = stack.pop()
                rec.append((e, 0, k, uuid))
            if not stack or end <= stack[-1][0]:
                break
        else:
            tracks.append([[], [], track_uuid(len(tracks))])
            stack, rec, uuid = tracks[-1]
        stack.append((end, key))
        rec.append((ts, 1, key, uuid))
    for stack, rec, uuid in tracks:
        while stack:
            e, k = stack.pop()
            rec.append((e, 0, k, uuid))
    return [rec for _, rec, _ in tracks]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 40)), max_size=40))
def test_assign_equals_the_reference(raw):
    spans = sorted((ts, -dur, i) for i, (ts, dur) in enumerate(raw))
    calls = []

    def uuid(t):
        calls.append(t)
        return 100 + t

    got = [t.records() for t in assign(spans, uuid)]
    assert got == _reference(spans, lambda t: 100 + t)
    assert calls == list(range(len(got)))
    for rec in got:  # every track nests: ends never before their begins, times never decrease
        assert [r[0] for r in rec] == sorted(r[0] for r in rec)
        open_ = []
        for ts, kind, key, _ in rec:
            if kind == 1:
                open_.append(key)
            else:
                assert open_.pop() == key
        assert not open_


@st.composite
def _forest(draw):
    """Spans as trees (a child lies within its parent; siblings may overlap when ``loose``,
    else they are disjoint and not empty), trees placed anywhere: (spans sorted as the writer
    sorts them, key -> parent key, loose)."""
    loose = draw(st.booleans())
    raw = []  # (ts, end, parent)

    def grow(ts, end, parent, depth):
        key = len(raw)
        raw.append((ts, end, parent))
        cur = ts
        for _ in range(draw(st.integers(0, 3)) if depth < 3 else 0):
            if loose:
                a = draw(st.integers(ts, end))
                b = draw(st.integers(a, end))
            elif cur < end:
                a = draw(st.integers(cur, end - 1))
                b = draw(st.integers(a + 1, end))
            else:
                break
            grow(a, b, key, depth + 1)
            cur = b

    for _ in range(draw(st.integers(1, 4))):
        ts = draw(st.integers(0, 80))
        grow(ts, ts + draw(st.integers(0, 60)), None, 0)
    spans = sorted((ts, ts - end, k) for k, (ts, end, _) in enumerate(raw))
    return spans, {k: p for k, (_, _, p) in enumerate(raw)}, loose


@settings(max_examples=300, deadline=None)
@given(_forest())
def test_assign_forest_nests_a_range_only_in_its_own_parent(forest):
    spans, parent, loose = forest
    got = [t.records() for t in assign_forest(spans, parent.get, lambda t: 100 + t)]
    inside = {}  # key -> the slice it is drawn in on its track (None: depth 0)
    ends = {k: ts - nd for ts, nd, k in spans}
    for rec in got:
        assert rec and [r[0] for r in rec] == sorted(r[0] for r in rec)
        open_ = []
        for ts, kind, key, _ in rec:
            if kind == 1:
                inside[key] = open_[-1] if open_ else None
                open_.append(key)
            else:
                assert open_.pop() == key and ends[key] == ts
        assert not open_
    assert sorted(inside) == sorted(parent)
    for key, p in inside.items():
        assert p in (None, parent[key])  # its own parent or the top level, never a stranger
        if not loose:  # disjoint siblings: every child is drawn in its parent
            assert p == parent[key]
