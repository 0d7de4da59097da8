"""overlap.assign (the writer's nesting-track policy) on random spans, against a plain reference.

The reference below is the policy as docs/design.md states it, written without shortcuts:
slices in (start, longest first, key) order; each goes on the first track whose open slices
all enclose it (closed ones popped as the track is visited), else on a new track.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from perfetto_graph_ann.write.perfetto.overlap import assign


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

    got = assign(spans, uuid)
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
