"""Where every event goes, before any byte is encoded: the writer's plan of a trace.

Phases, in order (each reads what the previous ones decided):

1. :func:`plan_events` reads the metadata first (track names and sort indices must be known
   before tracks are created) and finds the pids Kineto uses for GPUs; then places every
   event on a home (GPU lane, thread, named track, counter track) as a span, and adds the
   join's GPU projection (replay and scope ranges) as slices after the input events;
2. :func:`bind_flows` binds Kineto's flow events to slices (:mod:`.flows`) and adds a flow
   from each replay's CPU launch to its replay slice;
3. :func:`order_records` gives each slice a nesting track (:mod:`.overlap`) and merges
   everything into one timestamp-ordered table of (ts, kind, index, track uuid) records
   (:class:`Records`).

Spans and records are int64 columns, not tuples (a large trace has millions: issue 33's
peak memory); the args of an event are rewritten (placement args, stream, device, phase)
only when its packet is encoded (:meth:`Plan.args_of`).
"""
from __future__ import annotations

import dataclasses
from array import array
from functools import partial
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, MutableSequence, Optional, Sequence, Set, Tuple

from ... import settings
from ...read.model import CATEGORY_ALIASES, GPU_WORK_CATEGORIES, KinetoTrace, TraceEvent
from . import overlap
from .flows import FlowPlan, SliceStarts, plan_flows
from .tracks import TrackTable

if TYPE_CHECKING:  # annotation only: importing the join package costs time on every conversion
    from ...join.model import LaneLayout
    from .config import WriteStats

__all__ = ["ASSIGN", "BEGIN", "bind_flows", "COUNTER", "DROPPED", "END", "INSTANT", "KINDS_LOOP", "order_records",
           "PLACE_LOOP",
           "Plan", "plan_events", "Record", "Records", "SKIP", "SLICE", "SLICE_REWRITTEN", "Span", "TRACK_METADATA"]

try:  # the plan's per-event loop in C (_plan.c, built by hatch_build.py): the same plan
    from ._plan import assign_sorted as _compiled_assign, kinds_loop as _compiled_kinds_loop
    from ._plan import place_loop as _compiled_place_loop
except ImportError:
    _compiled_place_loop = _compiled_assign = _compiled_kinds_loop = None
#: :func:`_place`'s loop in C, or None where it is not built or ``PERFETTO_GRAPH_ANN_PURE_PYTHON``
#: was set at import (the Python loop then makes the same plan)
PLACE_LOOP = None if settings.switch(settings.PURE_PYTHON) else _compiled_place_loop
#: :func:`.overlap.assign` of a home's sorted spans in C (with :data:`PLACE_LOOP`), or None
ASSIGN = None if PLACE_LOOP is None else _compiled_assign
#: :func:`plan_events`' first walk (GPU pids, flow times, metadata events) in C (with
#: :data:`PLACE_LOOP`), or None
KINDS_LOOP = None if PLACE_LOOP is None else _compiled_kinds_loop

#: Record kinds (the second item of a record). An END record's index is its slice's; a
#: COUNTER record carries the counter's value in place of an index.
END, BEGIN, COUNTER = 0, 1, 4
#: ``Plan.kinds`` values: how an event (or projected range) is written.
SKIP = 0  #: not written as a slice or instant (flow events, untimed, counters)
TRACK_METADATA = -1  #: a metadata event the tracks consumed (names, sort indices)
#: a ``gpu_user_annotation`` left on a lane without GPU work by the join (not written, as torch 2.15)
DROPPED = -2
SLICE = 1  #: a slice whose args are written as they are
SLICE_REWRITTEN = 2  #: a slice whose args change when written (placement, stream, phase kept as an arg)
INSTANT = 3

Span = Tuple[int, int, int]
Record = Tuple[int, int, Any, int]
#: Spans sorted, or records read out, at a time (their Python ints live only this long).
_CHUNK = 1 << 16
_USER_ANNOTATION = "gpu_user_annotation"
_GPU_TRACK_CATEGORIES = GPU_WORK_CATEGORIES | {_USER_ANNOTATION}
_CAT = attrgetter("cat")
_HOME_ORDER = {"gpu": 0, "replays": 1, "scope": 2, "thread": 3, "wide_thread": 4, "named": 5}


class _Categories(dict):
    """Raw ``cat`` -> normalised category (``TraceEvent.category``), computed once per spelling."""

    def __missing__(self, cat: str) -> str:
        c = cat.lower()
        v = self[cat] = CATEGORY_ALIASES.get(c, c)
        return v


class _Lanes:
    """``Plan.rewrite`` of a joined trace (most of its GPU work rewritten): event index -> lane,
    4 bytes an event."""

    _NONE = -(1 << 31)

    def __init__(self, events: int) -> None:
        self.lanes = array("i", [self._NONE]) * events
        self.other: Dict[int, Any] = {}  # lanes beyond int32

    def __setitem__(self, i: int, lane: int) -> None:
        if type(lane) is int and self._NONE < lane < 1 << 31 and 0 <= i < len(self.lanes):
            self.lanes[i] = lane
        else:
            self.other[i] = lane

    def get(self, i: int, default: Any = None) -> Any:
        if 0 <= i < len(self.lanes):
            v = self.lanes[i]
            if v != self._NONE:
                return v
        return self.other.get(i, default)

    def __contains__(self, i: int) -> bool:
        return self.get(i) is not None

    def columns(self) -> Tuple["array[int]", Dict[int, Any]]:
        """The int32 lanes (-2^31: none) and the lanes beyond int32, for the writer's compiled loop."""
        return self.lanes, self.other

    def __len__(self) -> int:
        return len(self.lanes) - self.lanes.count(self._NONE) + len(self.other)


@dataclasses.dataclass
class Plan:
    """The writer's decisions for one trace. Indices from ``base`` on are the projected ranges."""

    events: List[TraceEvent]
    placements: Mapping[int, Any]  #: the join's placements by event index (empty without a layout)
    #: per index: how it is written (``SKIP``, ``TRACK_METADATA``, ``SLICE``, ``SLICE_REWRITTEN``, ``INSTANT``)
    kinds: MutableSequence[int]
    gpu_pids: Set[Any]  #: pids holding GPU work or GPU user annotations
    #: home -> its spans, (ts, -dur, index) after one another in one int64 array
    by_home: Dict[Tuple, "array[int]"] = dataclasses.field(default_factory=dict)
    rewrite: Dict[int, int] = dataclasses.field(default_factory=dict)  #: GPU work whose args change -> its lane
    #: events on a GPU pid with no int ``device`` arg -> the pid's device, written as their
    #: ``device`` arg when their args are rewritten (the SQL package counts GPU work by it)
    device_of: Dict[int, int] = dataclasses.field(default_factory=dict)
    counter_records: List[Record] = dataclasses.field(default_factory=list)
    #: the slices starting at a flow event's time (the only ones the flow binding looks up)
    starts: SliceStarts = dataclasses.field(default_factory=SliceStarts)
    flow_indices: List[int] = dataclasses.field(default_factory=list)  #: Kineto flow events (s / t / f with an id)
    ranges: Sequence[Any] = ()  #: the join's projected replay and scope ranges
    #: dependency edges between GPU work to draw as flows (``LaneLayout.edge_flows``)
    edge_flows: Sequence[Tuple[int, int]] = ()
    base: int = 0  #: ``len(events)``
    #: the events read again by index (:class:`...read.scan.EventSource`) where ``events`` are
    #: light (the two-pass read): the flows' correlation lookups, then the packet loop
    source: Any = None

    def __post_init__(self) -> None:
        #: ``placements.merge_args`` of a :class:`~...join.model.CompactPlacements`, else None
        self._merge_args = getattr(self.placements, "merge_args", None)

    def args_of(self, i: int) -> Mapping[str, Any]:
        """The args written for event ``i`` when they are not its own as they are: the join's
        placement args and the lane as ``stream`` (GPU work placed by the join or on a lane
        other than its stream arg), the pid's ``device``, and a phase other than X / i / I
        kept as the ``ph`` arg."""
        e = self.events[i]
        args = e.args
        lane = self.rewrite.get(i)
        if lane is not None:
            args = dict(args)
            merge = self._merge_args
            if merge is not None:  # a CompactPlacements: its rows' args written in, no placement made
                merge(i, args)
            else:
                p = self.placements.get(i)
                if p is not None:
                    args.update(p.args)
            args["stream"] = lane
            d = self.device_of.get(i)
            if d is not None:
                args["device"] = d
        ph = e.ph
        if ph != "X" and ph != "i" and ph != "I" and "ph" not in args:
            args = dict(args)
            args["ph"] = ph
        return args


def plan_events(trace: KinetoTrace, layout: Optional[LaneLayout], tracks: TrackTable, stats: WriteStats) -> Plan:
    """Phase 1: track metadata, GPU pids, every event's home and span, the projected ranges."""
    events = trace.events
    cats = _Categories()
    kinds: MutableSequence[int] = array("b", bytes(len(events)))  # SKIP each; a byte an event, not a list slot
    flow_ts = array("q")  # the flow events' times: the only slice starts the flow binding looks up
    marked: Optional[bool] = None  # whether a category is gpu_user_annotation (None: not known yet)
    if KINDS_LOOP is not None and type(events) is list:
        gpu_pids, metadata, marked = KINDS_LOOP(events, cats, _GPU_TRACK_CATEGORIES, flow_ts, _USER_ANNOTATION)
        for e in metadata:
            if tracks.consume_metadata(e):
                stats.metadata += 1
                kinds[e.index] = TRACK_METADATA
    else:
        gpu_pids = set()
        for e in events:
            ph = e.ph
            if ph == "X":
                if type(e.pid) is int and cats[e.cat] in _GPU_TRACK_CATEGORIES:
                    gpu_pids.add(e.pid)
            elif (ph == "s" or ph == "f" or ph == "t") and e.ts_ns is not None:
                flow_ts.append(e.ts_ns)
            elif ph == "M" and tracks.consume_metadata(e):
                stats.metadata += 1
                kinds[e.index] = TRACK_METADATA
    tracks.gpu_pids = gpu_pids
    plan = Plan(events, layout.placements if layout is not None else {}, kinds, gpu_pids, base=len(events))
    if layout is not None:  # most GPU work is rewritten: a lane an event (4 bytes), not a dict entry
        plan.rewrite = _Lanes(len(events))  # type: ignore[assignment]
    if marked is not False and layout is not None and any(p.annotation for p in layout.placements.values()):
        stats.dropped_user_annotations = _drop_orphaned_user_annotations(plan, cats)
    _place(plan, tracks, stats, cats)
    plan.starts = _flow_starts(plan, flow_ts)
    del flow_ts
    if layout is not None and layout.ranges:
        plan.ranges = layout.ranges
        kinds.extend([SLICE] * len(plan.ranges))
        for k, r in enumerate(plan.ranges):
            home = ("replays", r.device) if r.kind == "replay" else ("scope", r.device)
            plan.by_home.setdefault(home, array("q")).extend((r.ts, -r.dur, plan.base + k))
        stats.projected = len(plan.ranges)
    if layout is not None and getattr(layout, "edge_flows", None):
        plan.edge_flows = layout.edge_flows
    return plan


def _gpu_lane(e: TraceEvent, p: Any) -> Tuple[Any, Any]:
    """The (device, lane) an event on a GPU pid is drawn on (:func:`_place`'s rule)."""
    a = e.args
    device = a.get("device")
    stream_arg = a.get("stream")
    if type(device) is not int:
        device = e.device
        stream_arg = None
    return device, p.lane if p is not None else stream_arg if type(stream_arg) is int else e.stream


def _drop_orphaned_user_annotations(plan: Plan, cats: _Categories) -> int:
    """Mark ``DROPPED`` every ``gpu_user_annotation`` whose lane has no GPU work once the
    join's placements are applied; returns how many.

    torch 2.15's exporter, when it annotates, holds these back and writes them only where
    their lane still has work after the moves: CUPTI replicates a user annotation onto every
    stream a graph replays on, so on a stream whose work all moved to other lanes it is
    noise. The pftrace follows the same rule as the annotated Chrome JSON."""
    kinds, placements, gpu_pids = plan.kinds, plan.placements, plan.gpu_pids
    if not any(cats[c] == _USER_ANNOTATION for c in set(map(_CAT, plan.events))):
        return 0  # the usual graphed trace: no user annotation (one pass over the events' categories)
    gpu_work = []
    held = []
    for e in plan.events:
        if type(e.pid) is not int or e.pid not in gpu_pids or e.ts_ns is None or kinds[e.index] < 0:
            continue
        c = cats[e.cat]
        if c in GPU_WORK_CATEGORIES:
            gpu_work.append(e)
        elif c == _USER_ANNOTATION and e.ph not in ("s", "t", "f"):
            held.append(e)
    if not held:  # the usual graphed trace: no lane to look up
        return 0
    work = {_gpu_lane(e, placements.get(e.index)) for e in gpu_work}
    dropped = 0
    for e in held:
        if _gpu_lane(e, None) not in work:
            kinds[e.index] = DROPPED
            dropped += 1
    return dropped


def _place(plan: Plan, tracks: TrackTable, stats: WriteStats, cats: _Categories) -> None:
    """Every timed event's home and span; counters."""
    if PLACE_LOOP is not None and type(plan.events) is list:
        _place_compiled(plan, tracks, stats, cats)
        return
    kinds, gpu_pids, placements, by_home = plan.kinds, plan.gpu_pids, plan.placements, plan.by_home
    rewrite, device_of, flow_indices = plan.rewrite, plan.device_of, plan.flow_indices
    # a CompactPlacements' (lane, args not empty) without making a row's placement
    lane_of = getattr(placements, "lane_of", None)
    # a _Lanes' column written directly for an int32 lane (its __setitem__'s rule)
    lanes = rewrite.lanes if type(rewrite) is _Lanes else None
    n_lanes = len(lanes) if lanes is not None else 0
    no_lane = _Lanes._NONE
    # the extend of the by_home array of each (pid, tid) / (device, lane) seen, so most events
    # find theirs in one lookup (the last GPU lane's without any)
    cpu_spans: Dict[Tuple, Any] = {}
    gpu_spans: Dict[Tuple, Any] = {}
    last_device = last_lane = last_spans = None
    n_slices = n_instants = 0
    for e in plan.events:
        i = e.index
        if kinds[i] < 0:  # TRACK_METADATA, DROPPED
            continue
        ph = e.ph
        if ph in ("s", "t", "f") and e.id is not None:
            flow_indices.append(i)
            continue
        ts = e.ts_ns
        if ts is None:
            stats.untimed += 1
            continue
        if ph == "C":
            _counters(e, tracks, gpu_pids, plan.counter_records, stats)
            continue
        dur = e.dur_ns
        if dur is None or (ph != "X" and ph in ("i", "I", "M", "n", "R", "B", "E")):  # X first: the usual case
            kind = INSTANT
            dur = 0
            n_instants += 1
        else:
            kind = SLICE if ph == "X" else SLICE_REWRITTEN  # another phase: kept as the "ph" arg
            n_slices += 1
        spans = None
        pid = e.pid
        if type(pid) is int and pid in gpu_pids:
            if lane_of is not None:
                p = lane_of(i)
                placed_args = p is not None and p[1]
            else:
                p = placements.get(i)
                placed_args = p is not None and bool(p.args)
                if p is not None:
                    p = (p.lane,)
            a = e.args
            device = a.get("device")
            stream_arg = a.get("stream")
            if type(device) is not int:
                device = device_of[i] = e.device  # written as the device arg if the args are rewritten
                stream_arg = None  # forces that rewrite (GPU work); the lane is the same: e.stream
            lane = p[0] if p is not None else stream_arg if type(stream_arg) is int else e.stream
            if device is not None and lane is not None:
                if device == last_device and lane == last_lane:  # equal keys: the same dict entry
                    spans = last_spans
                else:
                    spans = gpu_spans.get((device, lane))
                    if spans is None:
                        spans = gpu_spans[(device, lane)] = by_home.setdefault(("gpu", device, lane),
                                                                              array("q")).extend
                    last_device, last_lane, last_spans = device, lane, spans
                # unchanged args are written as they are (no copy): no placement args and
                # already the lane as an int stream arg (True == 1, so check the type). Every
                # GPU work event on a lane, whatever its phase, carries the lane's device and
                # stream: the lane track's merge key tells SQL so (tracks.lane_merge_key)
                if cats[e.cat] in GPU_WORK_CATEGORIES and (
                        placed_args or type(stream_arg) is not int or stream_arg != lane):
                    if type(lane) is int and no_lane < lane < 1 << 31 and i < n_lanes:
                        lanes[i] = lane
                    else:
                        rewrite[i] = lane
                    if kind == SLICE:
                        kind = SLICE_REWRITTEN
        kinds[i] = kind
        if spans is None:
            key = (pid, e.tid)
            spans = cpu_spans.get(key)
            if spans is None:
                spans = cpu_spans[key] = by_home.setdefault(tracks.cpu_home(pid, e.tid), array("q")).extend
        spans((ts, -dur, i))
    stats.slices += n_slices
    stats.instants += n_instants


def _place_compiled(plan: Plan, tracks: TrackTable, stats: WriteStats, cats: _Categories) -> None:
    """:func:`_place` by :data:`PLACE_LOOP`: the same plan. A :class:`~...join.model.CompactPlacements`'
    rows are read from its columns; any other placement through the callable the Python loop uses."""
    placements, rewrite = plan.placements, plan.rewrite
    columns = getattr(placements, "columns", None)
    lane_of = getattr(placements, "lane_of", None)
    if columns is not None and lane_of is not None:
        row, node, _, hw, _, nodes, kept, every, _, _ = columns()
        placed = lane_of
    else:
        row = node = hw = None
        nodes, kept, every = [], {}, False

        def placed(i: int) -> Optional[Tuple[Any, bool]]:
            p = placements.get(i)
            return None if p is None else (p.lane, bool(p.args))
        if not placements:
            placed = None  # type: ignore[assignment]
    gpu_pids, records = plan.gpu_pids, plan.counter_records

    def counters(e: TraceEvent) -> None:
        _counters(e, tracks, gpu_pids, records, stats)
    slices, instants, untimed = PLACE_LOOP(plan.events, (  # type: ignore[misc]  # _plan.c's order
        plan.kinds, gpu_pids, row, node, hw, nodes, every, kept, placed,
        rewrite.lanes if type(rewrite) is _Lanes else None, rewrite, plan.device_of, plan.flow_indices, plan.by_home,
        partial(array, "q"), tracks.cpu_home, cats, GPU_WORK_CATEGORIES, counters))
    stats.slices += slices
    stats.instants += instants
    stats.untimed += untimed


def _flow_starts(plan: Plan, flow_ts: "array[int]") -> SliceStarts:
    """The slices (not instants) starting at one of the times ``flow_ts``, by start time, in
    file order at equal times: the only slices a flow event may bind to. ``flow_ts`` is
    emptied once read (its memory goes to the lookups)."""
    if not flow_ts or not plan.by_home:
        return SliceStarts()
    import numpy as np

    times = np.sort(np.frombuffer(flow_ts, np.int64), kind="stable")  # nearly sorted: fast (np.unique hashes)
    del flow_ts[:]
    times = times[np.concatenate(([True], times[1:] != times[:-1]))]  # once each
    last = len(times) - 1
    kinds = np.frombuffer(plan.kinds, np.int8)
    starts, keys = [], []
    for flat in plan.by_home.values():
        spans = np.frombuffer(flat, np.int64).reshape(-1, 3)
        at = np.searchsorted(times, spans[:, 0])
        np.minimum(at, last, out=at)
        hit = np.flatnonzero(times[at] == spans[:, 0])
        del at
        index = spans[hit, 2]
        k = kinds[index]
        slice_ = (k == SLICE) | (k == SLICE_REWRITTEN)
        starts.append(spans[hit[slice_], 0])
        keys.append(index[slice_])
        del spans, hit, index, k, slice_
    del kinds  # a view: plan.kinds grows later
    index = np.concatenate(keys)
    del keys
    ts = np.concatenate(starts)
    del starts
    order = np.lexsort((index, ts))
    index = index[order]
    ts = ts[order]
    del order
    events, get = [], plan.events.__getitem__
    for at in range(0, len(index), _CHUNK):
        events.extend(map(get, index[at:at + _CHUNK].tolist()))
    return SliceStarts(ts, events)


def _counters(e: TraceEvent, tracks: TrackTable, gpu_pids: Set[Any], out: List[Record], stats: WriteStats) -> None:
    """One COUNTER record per numeric arg of a counter event (``ph`` C), on its counter track."""
    device = e.pid if type(e.pid) is int and e.pid in gpu_pids else None
    for key, value in e.args.items():
        if type(value) not in (int, float):
            continue
        name = e.name if len(e.args) == 1 else f"{e.name} {key}"
        uuid = tracks.counter_track(e.pid, e.tid, name, device)
        out.append((e.ts_ns, COUNTER, value, uuid))
        stats.counter_values += 1


def bind_flows(plan: Plan, stats: WriteStats) -> FlowPlan:
    """Phase 2: Kineto's flow events bound to slices, then a flow from each replay's CPU
    launch slice to its replay slice (ids after Kineto's), then the replays' dependency
    edges, when the join was asked for them."""
    stats.flow_events = len(plan.flow_indices)
    # many flow ends (a flow to every kernel): ids in an array, 4 bytes an event, not ~120 a target
    many = len(plan.flow_indices) * 8 >= plan.base
    fp = plan_flows(plan.events, plan.flow_indices, plan.starts,
                    plan.source.__getitem__ if plan.source is not None else None, size=plan.base if many else 0)
    next_id = fp.count + 1
    for k, r in enumerate(plan.ranges):
        src = r.launch
        if src is None or plan.kinds[src] not in (SLICE, SLICE_REWRITTEN):
            continue
        fp.outgoing.setdefault(src, array("q")).append(next_id)
        fp.terminating[plan.base + k] = [next_id]
        next_id += 1
    for src, dst in plan.edge_flows:  # dependency edges of replays (join(edge_flows=True))
        if plan.kinds[src] not in (SLICE, SLICE_REWRITTEN) or plan.kinds[dst] not in (SLICE, SLICE_REWRITTEN):
            continue
        fp.outgoing.setdefault(src, array("q")).append(next_id)
        fp.terminating[dst] = list(fp.terminating.get(dst, ())) + [next_id]
        next_id += 1
    fp.count = next_id - 1
    stats.flows = fp.count
    stats.unbound_flow_events = fp.unbound
    stats.flow_ends_without_start = fp.without_start
    return fp


class Records:
    """The timestamp-ordered records of a plan as columns (:func:`order_records`): per record
    its ``ts``, ``kind`` (``BEGIN``, ``END``, ``COUNTER``), ``key`` (the slice's index; for a
    COUNTER record the position of its value in ``values``) and track ``uuid``."""

    def __init__(self, ts: Any, kind: Any, key: Any, uuid: Any, values: List[Any]) -> None:
        self.ts, self.kind, self.key, self.uuid, self.values = ts, kind, key, uuid, values

    def __len__(self) -> int:
        return len(self.ts)

    def chunks(self, size: int) -> Iterator[Tuple[List[int], List[int], List[int], List[int]]]:
        """The records ``size`` at a time, as lists: (ts, kind, key, uuid)."""
        for at in range(0, len(self.ts), size):
            end = at + size
            yield (self.ts[at:end].tolist(), self.kind[at:end].tolist(), self.key[at:end].tolist(),
                   self.uuid[at:end].tolist())

    def begun(self, size: int, below: int) -> Iterator[List[int]]:
        """Per chunk of :meth:`chunks`, the keys below ``below`` of its BEGIN records, in order:
        the input events a two-pass batch reads again (the projected ranges' keys are above)."""
        for at in range(0, len(self.ts), size):
            end = at + size
            key = self.key[at:end]
            yield key[(self.kind[at:end] == BEGIN) & (key < below)].tolist()


def order_records(plan: Plan, tracks: TrackTable, stats: WriteStats) -> Tuple[Records, Dict[int, int]]:
    """Phase 3: nesting tracks per home, then one timestamp-ordered table of records.

    Returns the records and the number of packets per track uuid.
    """
    import numpy as np

    assigned: List[overlap.TrackRecords] = []
    range_parents: Optional[Dict[int, int]] = None  # slice key of a range -> that of its parent range
    for home in sorted(plan.by_home, key=_home_order):
        new_track = partial(tracks.track, home)
        if ASSIGN is not None and home[0] not in _RANGE_HOMES:  # the sorted spans read as they are, in C
            flat = _sorted_array(plan.by_home[home])
            plan.by_home[home] = array("q")
            assigned.extend(ASSIGN(flat, new_track, overlap.TrackRecords))
            del flat
            continue
        spans = _sorted_spans(plan.by_home[home])  # (ts, -dur, index): start, longest first, file order
        plan.by_home[home] = array("q")  # done with once sorted: its memory goes to the records
        if home[0] in _RANGE_HOMES:  # the projection: ranges nest by scope, not by time alone
            if range_parents is None:
                base = plan.base
                range_parents = {base + k: base + r.parent for k, r in enumerate(plan.ranges) if r.parent is not None}
            assigned.extend(overlap.assign_forest(spans, range_parents.get, new_track))
        else:
            assigned.extend(overlap.assign(spans, new_track))
        del spans
    # one table: the tracks' records one after another, then the counters'; a stable sort by
    # time keeps that order at equal timestamps
    counters = plan.counter_records
    n = sum(map(len, assigned)) + len(counters)
    ts = np.empty(n, np.int64)
    key = np.empty(n, np.int64)
    kind = np.empty(n, np.int8)
    uuid = np.empty(n, np.int32)  # uuids are 1, 2, ... (TrackTable.max_uuid)
    packets_per_track: Dict[int, int] = {}
    at = 0
    for t in assigned:
        end = at + len(t)
        ts[at:end] = np.frombuffer(t.ts, np.int64)
        codes = np.frombuffer(t.codes, np.int64)
        key[at:end] = codes >> 1
        kind[at:end] = codes & 1
        del codes
        uuid[at:end] = t.uuid
        packets_per_track[t.uuid] = len(t)
        t.ts = t.codes = None  # type: ignore[assignment]  # freed as they are copied
        at = end
    del assigned
    values = []
    for k, (t_ns, _, value, u) in enumerate(counters):
        ts[at + k] = t_ns
        key[at + k] = k
        kind[at + k] = COUNTER
        uuid[at + k] = u
        values.append(value)
        packets_per_track[u] = packets_per_track.get(u, 0) + 1
    order = np.argsort(ts, kind="stable")
    ts = ts[order]
    key = key[order]
    kind = kind[order]
    uuid = uuid[order]
    stats.spill_tracks = tracks.spill_tracks
    stats.tracks = len(tracks.descriptors)
    return Records(ts, kind, key, uuid, values), packets_per_track


def _sorted_spans(flat: "array[int]") -> Iterator[Span]:
    """The spans of one home (``Plan.by_home``) in (ts, -dur, index) order, made tuples
    :data:`_CHUNK` at a time."""
    spans, order = _span_order(flat)

    def chunk(at: int) -> Iterator[Span]:
        return zip(*spans[order[at:at + _CHUNK]].T.tolist())
    return chain.from_iterable(map(chunk, range(0, len(order), _CHUNK)))


def _sorted_array(flat: "array[int]") -> Any:
    """The spans of one home in (ts, -dur, index) order, as one C-contiguous (n, 3) int64 array."""
    spans, order = _span_order(flat)
    return spans[order]


def _span_order(flat: "array[int]") -> Tuple[Any, Any]:
    """The spans of one home as an (n, 3) int64 array, and the order that sorts them."""
    import numpy as np

    spans = np.frombuffer(flat, np.int64).reshape(-1, 3)
    # by start (stable: the spans were added in index order; nearly sorted already, so fast),
    # then the runs of equal starts longest first
    order = np.argsort(spans[:, 0], kind="stable")
    ts = spans[order, 0]
    tie = ts[1:] == ts[:-1]
    if tie.any():
        tied = np.zeros(len(ts), bool)
        tied[1:] = tie
        tied[:-1] |= tie
        at = np.flatnonzero(tied)
        sub = order[at]
        order[at] = sub[np.lexsort((spans[sub, 1], ts[at]))]
    del ts, tie
    return spans, order


_RANGE_HOMES = ("replays", "scope")


def _home_order(home: Tuple) -> Tuple:
    return (_HOME_ORDER[home[0]],) + tuple((0, x) if type(x) is int else (1, str(x)) for x in home[1:])
