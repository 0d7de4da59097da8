"""Overlap policy: put every slice of one lane on a track where it nests properly.

Perfetto's slice tracker assumes the slices of one track nest; an overlapping slice
silently gets a wrong duration or parent. Policy (see docs/design.md, "Overlap policy"): never
clamp, spill. Slices are taken in (start, longest first, file order); a slice goes on the
first track of its lane whose open slices all enclose it, else on a new "spill" track with
the same name (the UI merges same-named siblings into one lane). Times are never changed, so
the trace processor reports every slice with its exact ts and dur.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["assign", "assign_forest", "Record", "Span"]

#: (ts_ns, -dur_ns, key): key is anything the caller needs back (e.g. an event index). The
#: negated duration makes the plain tuple order the nesting order (start, longest first, key).
Span = Tuple[int, int, int]
#: (ts_ns, kind, key, track uuid); kind 1 = begin, 0 = end.
Record = Tuple[int, int, int, int]


def assign(spans: Sequence[Span], track_uuid: Callable[[int], int]) -> List[List[Record]]:
    """Assign spans (already sorted: ``sorted(spans)``) to nesting tracks.

    Returns ``records``: ``records[t]`` holds the ordered (ts, kind, key, uuid) begin (kind 1)
    / end (kind 0) records of track ``t`` (0 = the lane's own track, 1.. = spill tracks), in
    an order whose timestamps never decrease and that nests properly (ends before begins at
    equal ts, inner ends first). ``track_uuid(t)`` is called once per track, in order, when
    the track is first needed; its result is the records' uuid.
    """
    stacks: List[List[Tuple[int, int]]] = []  # per track: (end_ns, key) of open slices
    records: List[List[Record]] = []
    uuids: List[int] = []
    # the lane's own track (0), held in locals: nearly every slice goes there
    stack0: List[Tuple[int, int]] = []
    rec0: List[Record] = []
    uuid0 = 0
    for ts, neg_dur, key in spans:
        end = ts - neg_dur
        if stacks:
            while stack0 and stack0[-1][0] <= ts:
                e, k = stack0.pop()
                rec0.append((e, 0, k, uuid0))
            if not stack0 or end <= stack0[-1][0]:
                stack0.append((end, key))
                rec0.append((ts, 1, key, uuid0))
                continue
        placed = -1
        for t in range(1, len(stacks)):
            stack = stacks[t]
            rec = records[t]
            while stack and stack[-1][0] <= ts:
                e, k = stack.pop()
                rec.append((e, 0, k, uuids[t]))
            if not stack or end <= stack[-1][0]:
                placed = t
                break
        if placed < 0:
            placed = len(stacks)
            stacks.append(stack0 if placed == 0 else [])
            records.append(rec0 if placed == 0 else [])
            uuids.append(track_uuid(placed))
            uuid0 = uuids[0]
        stacks[placed].append((end, key))
        records[placed].append((ts, 1, key, uuids[placed]))
    return _close_all(stacks, records, uuids)


def assign_forest(spans: Sequence[Span], parent_of: Callable[[int], Optional[int]],
                  track_uuid: Callable[[int], int]) -> List[List[Record]]:
    """Like :func:`assign`, for slices whose nesting is given, not read off their times.

    ``parent_of(key)`` is the key of the slice ``key`` belongs inside (None: a top-level
    slice). The GPU projection's ranges are such a forest: a scope belongs inside its
    enclosing scope of the same replay, never inside another replay's scope that happens to
    span it (concurrent replays, parallel branches). A slice goes on its parent's track when
    the parent is the innermost slice open there (and encloses it); any other slice goes on
    the first track with nothing open, so a slice is drawn either inside its own parent or at
    depth 0, never inside a stranger. Same records as :func:`assign`.
    """
    stacks: List[List[Tuple[int, int]]] = []
    records: List[List[Record]] = []
    uuids: List[int] = []
    track_of: Dict[int, int] = {}
    for ts, neg_dur, key in spans:
        end = ts - neg_dur
        placed = -1
        parent = parent_of(key)
        if parent is not None:
            t = track_of.get(parent, -1)
            if t >= 0:
                stack = stacks[t]
                while stack and stack[-1][0] <= ts:
                    e, k = stack.pop()
                    records[t].append((e, 0, k, uuids[t]))
                if stack and stack[-1][1] == parent and end <= stack[-1][0]:
                    placed = t
        if placed < 0:  # the first track with nothing open (closed slices popped as it is visited)
            for t, stack in enumerate(stacks):
                while stack and stack[-1][0] <= ts:
                    e, k = stack.pop()
                    records[t].append((e, 0, k, uuids[t]))
                if not stack:
                    placed = t
                    break
            else:
                placed = len(stacks)
                stacks.append([])
                records.append([])
                uuids.append(track_uuid(placed))
        track_of[key] = placed
        stacks[placed].append((end, key))
        records[placed].append((ts, 1, key, uuids[placed]))
    return _close_all(stacks, records, uuids)


def _close_all(stacks: List[List[Tuple[int, int]]], records: List[List[Record]], uuids: List[int]) -> List[List[Record]]:
    """End every slice still open on each track, innermost first; returns ``records``."""
    for t, stack in enumerate(stacks):
        rec = records[t]
        while stack:
            e, k = stack.pop()
            rec.append((e, 0, k, uuids[t]))
    return records
