"""Overlap policy: put every slice of one lane on a track where it nests properly.

Perfetto's slice tracker assumes the slices of one track nest; an overlapping slice
silently gets a wrong duration or parent. Policy (see docs/design.md, "converter"): never
clamp, spill. Slices are taken in (start, longest first, file order); a slice goes on the
first track of its lane whose open slices all enclose it, else on a new "spill" track with
the same name (the UI merges same-named siblings into one lane). Times are never changed, so
the trace processor reports every slice with its exact ts and dur.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

#: (ts_ns, dur_ns, key): key is anything the caller needs back (e.g. an event index).
Span = Tuple[int, int, int]


def assign(spans: Sequence[Span]) -> Tuple[List[int], List[List[Tuple[int, int, int]]]]:
    """Assign spans (already sorted by ts, -dur, key) to nesting tracks.

    Returns ``(track_of, records)``: ``track_of[i]`` is the track number (0 = the lane's
    own track, 1.. = spill tracks) of ``spans[i]``, and ``records[t]`` the ordered
    (ts, kind, key) begin (kind 1) / end (kind 0) records of track ``t``, in an order whose
    timestamps never decrease and that nests properly (ends before begins at equal ts,
    inner ends first).
    """
    stacks: List[List[Tuple[int, int]]] = []  # per track: (end_ns, key) of open slices
    records: List[List[Tuple[int, int, int]]] = []
    track_of: List[int] = []
    for ts, dur, key in spans:
        end = ts + dur
        placed = -1
        for t, stack in enumerate(stacks):
            rec = records[t]
            while stack and stack[-1][0] <= ts:
                e, k = stack.pop()
                rec.append((e, 0, k))
            if not stack or end <= stack[-1][0]:
                placed = t
                break
        if placed < 0:
            placed = len(stacks)
            stacks.append([])
            records.append([])
        stacks[placed].append((end, key))
        records[placed].append((ts, 1, key))
        track_of.append(placed)
    for t, stack in enumerate(stacks):
        rec = records[t]
        while stack:
            e, k = stack.pop()
            rec.append((e, 0, k))
    return track_of, records

