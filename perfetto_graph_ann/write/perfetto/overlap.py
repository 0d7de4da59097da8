"""Overlap policy: put every slice of one lane on a track where it nests properly.

Perfetto's slice tracker assumes the slices of one track nest; an overlapping slice
silently gets a wrong duration or parent. Policy (see docs/design.md, "Overlap policy"): never
clamp, spill. Slices are taken in (start, longest first, file order); a slice goes on the
first track of its lane whose open slices all enclose it, else on a new "spill" track with
the same name (the UI merges same-named siblings into one lane). Times are never changed, so
the trace processor reports every slice with its exact ts and dur.

Each track's records are two int64 columns (:class:`TrackRecords`), not a tuple a record:
a large trace has millions of them.
"""
from __future__ import annotations

from array import array
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

__all__ = ["assign", "assign_forest", "Record", "Span", "TrackRecords"]

#: (ts_ns, -dur_ns, key): key is the int the caller needs back (e.g. an event index). The
#: negated duration makes the plain tuple order the nesting order (start, longest first, key).
Span = Tuple[int, int, int]
#: (ts_ns, kind, key, track uuid); kind 1 = begin, 0 = end.
Record = Tuple[int, int, int, int]


class TrackRecords:
    """The ordered begin / end records of one track: ``ts`` (int64) and ``codes`` (int64:
    ``key * 2 + kind``, kind 1 = begin, 0 = end), all on track ``uuid``."""

    __slots__ = ("uuid", "ts", "codes")

    def __init__(self, uuid: int) -> None:
        self.uuid = uuid
        self.ts = array("q")
        self.codes = array("q")

    def __len__(self) -> int:
        return len(self.ts)

    def records(self) -> List[Record]:
        """The records as (ts, kind, key, uuid) tuples (tests, small tracks)."""
        u = self.uuid
        return [(t, c & 1, c >> 1, u) for t, c in zip(self.ts, self.codes)]


def assign(spans: Iterable[Span], track_uuid: Callable[[int], int]) -> List[TrackRecords]:
    """Assign spans (already sorted: ``sorted(spans)``) to nesting tracks.

    Returns one :class:`TrackRecords` per track (0 = the lane's own track, 1.. = spill
    tracks): its begin (kind 1) / end (kind 0) records in an order whose timestamps never
    decrease and that nests properly (ends before begins at equal ts, inner ends first).
    ``track_uuid(t)`` is called once per track, in order, when the track is first needed;
    its result is the records' uuid.
    """
    stacks: List[List[Tuple[int, int]]] = []  # per track: (end_ns, key * 2: the end's code) of open slices
    records: List[TrackRecords] = []
    # the lane's own track (0), held in locals: nearly every slice goes there
    stack0: List[Tuple[int, int]] = []
    ts0: Any = None  # its records' appends
    code0: Any = None
    for ts, neg_dur, key in spans:
        end = ts - neg_dur
        code = key * 2
        if stacks:
            while stack0 and stack0[-1][0] <= ts:
                e, c = stack0.pop()
                ts0(e)
                code0(c)
            if not stack0 or end <= stack0[-1][0]:
                stack0.append((end, code))
                ts0(ts)
                code0(code + 1)
                continue
        placed = -1
        for t in range(1, len(stacks)):
            stack = stacks[t]
            rec = records[t]
            while stack and stack[-1][0] <= ts:
                e, c = stack.pop()
                rec.ts.append(e)
                rec.codes.append(c)
            if not stack or end <= stack[-1][0]:
                placed = t
                break
        if placed < 0:
            placed = len(stacks)
            stacks.append(stack0 if placed == 0 else [])
            records.append(TrackRecords(track_uuid(placed)))
            if placed == 0:
                ts0, code0 = records[0].ts.append, records[0].codes.append
        stacks[placed].append((end, code))
        rec = records[placed]
        rec.ts.append(ts)
        rec.codes.append(code + 1)
    return _close_all(stacks, records)


def assign_forest(spans: Iterable[Span], parent_of: Callable[[int], Optional[int]],
                  track_uuid: Callable[[int], int]) -> List[TrackRecords]:
    """Like :func:`assign`, for slices whose nesting is given, not read off their times.

    ``parent_of(key)`` is the key of the slice ``key`` belongs inside (None: a top-level
    slice). The GPU projection's ranges are such a forest: a scope belongs inside its
    enclosing scope of the same replay, never inside another replay's scope that happens to
    span it (concurrent replays, parallel branches). A slice goes on its parent's track when
    the parent is the innermost slice open there (and encloses it); any other slice goes on
    the first track with nothing open, so a slice is drawn either inside its own parent or at
    depth 0, never inside a stranger. Same records as :func:`assign`.
    """
    stacks: List[List[Tuple[int, int]]] = []  # per track: (end_ns, key * 2) of open slices
    records: List[TrackRecords] = []
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
                    e, c = stack.pop()
                    records[t].ts.append(e)
                    records[t].codes.append(c)
                if stack and stack[-1][1] == parent * 2 and end <= stack[-1][0]:
                    placed = t
        if placed < 0:  # the first track with nothing open (closed slices popped as it is visited)
            for t, stack in enumerate(stacks):
                while stack and stack[-1][0] <= ts:
                    e, c = stack.pop()
                    records[t].ts.append(e)
                    records[t].codes.append(c)
                if not stack:
                    placed = t
                    break
            else:
                placed = len(stacks)
                stacks.append([])
                records.append(TrackRecords(track_uuid(placed)))
        track_of[key] = placed
        stacks[placed].append((end, key * 2))
        records[placed].ts.append(ts)
        records[placed].codes.append(key * 2 + 1)
    return _close_all(stacks, records)


def _close_all(stacks: List[List[Tuple[int, int]]], records: List[TrackRecords]) -> List[TrackRecords]:
    """End every slice still open on each track (``(end_ns, its end's code)``), innermost
    first; returns ``records``."""
    for stack, rec in zip(stacks, records):
        while stack:
            e, c = stack.pop()
            rec.ts.append(e)
            rec.codes.append(c)
    return records
