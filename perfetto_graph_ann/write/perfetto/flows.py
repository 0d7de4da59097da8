"""Flows: bind Kineto's flow events (``ph`` s / t / f) to the slices they point at.

Kineto writes a flow start (``s``) at the start of the launching CPU call and a flow end
(``f``, ``bp: "e"``) at the start of each GPU slice it launched, both with the CUPTI
correlation as ``id`` (category ``ac2g``); a graph launch has one ``s`` and one ``f`` per
kernel of the replay. torch also writes ``fwdbwd`` flows the same way. Each flow event is
bound to the slice that starts at its timestamp on its (pid, tid); the result is one
Perfetto flow (TrackEvent ``flow_ids`` on the source, ``terminating_flow_ids`` on the
target) per (source slice, target slice) pair, so a graph launch fans out to all its kernels.
Flow events that match no slice, or ids with no start, are counted in :class:`FlowPlan`.
"""
from __future__ import annotations

import dataclasses
from array import array
from itertools import chain
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ... import settings
from ...read.model import TraceEvent

__all__ = ["BIND_FLOW_EVENTS", "FlowEnds", "FlowPlan", "NUMBER_FLOWS", "plan_flows", "SliceStarts"]

try:  # the binding loop in C (_plan.c, built by hatch_build.py): the same sources and targets
    from ._plan import bind_flow_events as _compiled_bind, number_flows as _compiled_number
except ImportError:
    _compiled_bind = _compiled_number = None
#: :func:`plan_flows`' binding loop in C, or None where it is not built or
#: ``PERFETTO_GRAPH_ANN_PURE_PYTHON`` was set at import (the Python loop then)
BIND_FLOW_EVENTS = None if settings.switch(settings.PURE_PYTHON) else _compiled_bind
#: :func:`plan_flows`' numbering of the bound flows into a :class:`FlowEnds`, in C (with
#: :data:`BIND_FLOW_EVENTS`), or None
NUMBER_FLOWS = None if BIND_FLOW_EVENTS is None else _compiled_number

#: Flow events looked up at a time (:meth:`SliceStarts.bounds`).
_CHUNK = 1 << 16
#: Flow ids a :class:`FlowEnds` column holds are below this (int32).
_ONE_MAX = 1 << 31


class SliceStarts:
    """The slices a flow event may bind to by start time: ``ts`` (sorted, a numpy int64
    array) and ``events`` (the slices in that order; file order at equal times). A column
    and a list slot a slice, not a dict entry: a flow to every kernel makes them many."""

    def __init__(self, ts: Any = None, events: Sequence[TraceEvent] = ()) -> None:
        self.ts = ts
        self.events = events

    def __len__(self) -> int:
        return len(self.events)

    def bounds(self, times: Sequence[Optional[int]]) -> Tuple[List[int], List[int]]:
        """Per time (None: none) the slices starting then: ``events[lo:hi]``, as (lo, hi) lists."""
        if not self.events:
            return [0] * len(times), [0] * len(times)
        import numpy as np

        at = np.array([-1 if t is None else t for t in times], np.int64)  # ts is never negative
        return (np.searchsorted(self.ts, at, "left").tolist(), np.searchsorted(self.ts, at, "right").tolist())


class FlowEnds:
    """``FlowPlan.terminating`` over ``size`` events: event index -> the flow ids it ends.
    Most targets (a kernel) end one flow: its id is held in an array, 4 bytes an event, and
    given back as a 1-tuple; other values are kept as set."""

    def __init__(self, size: int) -> None:
        self.one = array("i", bytes(4 * size))  # 0: none here (flow ids start at 1)
        self.more: Dict[int, Sequence[int]] = {}

    def __setitem__(self, i: int, ids: Sequence[int]) -> None:
        if 0 <= i < len(self.one):
            if len(ids) == 1 and type(ids[0]) is int and 0 < ids[0] < _ONE_MAX:
                self.one[i] = ids[0]
                self.more.pop(i, None)
                return
            self.one[i] = 0
        self.more[i] = ids

    def get(self, i: int, default: Any = None) -> Any:
        if 0 <= i < len(self.one):
            v = self.one[i]
            if v:
                return (v,)
        return self.more.get(i, default)

    def __getitem__(self, i: int) -> Sequence[int]:
        v = self.get(i)
        if v is None:
            raise KeyError(i)
        return v

    def __contains__(self, i: object) -> bool:
        return type(i) is int and self.get(i) is not None

    def __len__(self) -> int:
        return len(self.one) - self.one.count(0) + len(self.more)


@dataclasses.dataclass
class FlowPlan:
    """Flow ids per event index: outgoing on sources, terminating on targets."""

    #: a source's flow ids in an int64 array (a graph launch starts one to each of its kernels)
    outgoing: Dict[int, "array[int]"] = dataclasses.field(default_factory=dict)
    #: a dict, or :class:`FlowEnds` (``plan_flows(size=...)``)
    terminating: Any = dataclasses.field(default_factory=dict)
    count: int = 0  #: flows written
    unbound: int = 0  #: flow events with no slice starting at their ts on their thread
    without_start: int = 0  #: bound flow ends whose id has no bound start


def plan_flows(events: Sequence[TraceEvent], flow_indices: Sequence[int], starts: SliceStarts,
               whole: Optional[Callable[[int], TraceEvent]] = None, size: int = 0) -> FlowPlan:
    """Bind the flow events ``events[i]`` for ``i`` in ``flow_indices`` (``ph`` s / t / f with
    an id) to slices.

    ``starts``: the slices by start time, in file order where several start at once (nested
    slices, other threads), over every slice a flow may bind to; the writer finds them while
    it places the slices. The thread is compared on lookup. ``whole``: event
    index -> the event with all its args, where ``events`` are light (:mod:`...read.scan`).
    ``size``: the trace's events; with it the flow ends are a :class:`FlowEnds`.
    """
    plan = FlowPlan(terminating=FlowEnds(size)) if size else FlowPlan()
    sources: Dict[object, int] = {}
    targets: Dict[object, List[int]] = {}
    main_cat = None
    unbound = 0
    slices = starts.events

    def bind_many(fe: TraceEvent, lo: int, hi: int) -> Optional[TraceEvent]:
        """The slice a flow event binds to where not exactly one starts at its time."""
        pid, tid = fe.pid, fe.tid
        c = [x for x in slices[lo:hi] if x.pid == pid and x.tid == tid]
        if not c:
            return None
        return c[0] if len(c) == 1 else _pick(c, fe.id, whole)

    if BIND_FLOW_EVENTS is not None and type(slices) is list:
        state: List[Any] = [None, 0]  # the first flow event's category, the unbound count
        for part, lo_l, hi_l in _chunks(events, flow_indices, starts):
            BIND_FLOW_EVENTS(part, lo_l, hi_l, slices, sources, targets, state, bind_many)
        unbound = state[1]
        flow_indices = ()  # bound: the loop below has nothing to do
    for fe, lo, hi in _looked_up(events, flow_indices, starts):
        if fe.ts_ns is None:
            continue
        if main_cat is None:
            main_cat = fe.cat
        if hi - lo == 1:
            c = slices[lo]
            if c.pid == fe.pid and c.tid == fe.tid:
                target = c
            else:
                unbound += 1
                continue
        else:
            target = bind_many(fe, lo, hi)
            if target is None:
                unbound += 1
                continue
        cat = fe.cat
        key = fe.id if cat == main_cat else (cat, fe.id)
        if fe.ph == "s":
            if key not in sources:
                sources[key] = target.index
        else:
            t = targets.get(key)
            if t is None:
                targets[key] = [target.index]
            else:
                t.append(target.index)
    plan.unbound = unbound
    _number(plan, sources, targets)
    return plan


def _number(plan: FlowPlan, sources: Dict[object, int], targets: Dict[object, List[int]]) -> None:
    """Give each bound (source, target) pair of ``plan`` its flow id, in ``targets``' order:
    ``plan.outgoing``, ``plan.terminating``, ``plan.count`` and ``plan.without_start``."""
    outgoing, terminating = plan.outgoing, plan.terminating
    if NUMBER_FLOWS is not None and type(terminating) is FlowEnds:
        plan.count, without = NUMBER_FLOWS(targets, sources, outgoing, terminating.one, terminating.more, terminating,
                                           _ONE_MAX, _new_out)
        plan.without_start += without
        return
    # a FlowEnds' column written directly where a target's first flow goes into it (its
    # __setitem__'s rule: an id in [1, 2^31) and nothing held for the target yet)
    one, more = (terminating.one, terminating.more) if type(terminating) is FlowEnds else (None, None)
    size = len(one) if one is not None else 0
    next_id = 1
    for key, tgts in targets.items():
        src = sources.get(key)
        if src is None:
            plan.without_start += len(tgts)
            continue
        out = outgoing.get(src)
        if out is None:
            out = outgoing[src] = array("q")
        for t in tgts:
            if t == src:
                continue
            out.append(next_id)
            if 0 <= t < size and not one[t] and next_id < _ONE_MAX and t not in more:
                one[t] = next_id
            else:
                term = terminating.get(t)  # a tuple: most targets (a kernel) end one flow; 32 bytes less than a list
                terminating[t] = (next_id,) if term is None else term + (next_id,)
            next_id += 1
        if not out:
            del outgoing[src]
    plan.count = next_id - 1


def _new_out() -> "array[int]":
    """A source's outgoing flow ids (:data:`NUMBER_FLOWS` makes one per source)."""
    return array("q")


def _chunks(events: Sequence[TraceEvent], flow_indices: Sequence[int],
            starts: SliceStarts) -> Iterator[Tuple[List[TraceEvent], List[int], List[int]]]:
    """The flow events :data:`_CHUNK` at a time, with the bounds of the slices starting at
    each one's time (``starts.bounds``)."""
    for at in range(0, len(flow_indices), _CHUNK):
        part = [events[i] for i in flow_indices[at:at + _CHUNK]]
        lo, hi = starts.bounds([fe.ts_ns for fe in part])
        yield part, lo, hi


def _looked_up(events: Sequence[TraceEvent], flow_indices: Sequence[int],
               starts: SliceStarts) -> Iterator[Tuple[TraceEvent, int, int]]:
    """Each flow event with the bounds of the slices starting at its time (:func:`_chunks`)."""
    return chain.from_iterable(zip(*c) for c in _chunks(events, flow_indices, starts))


def _pick(cands: List[TraceEvent], flow_id: object,
          whole: Optional[Callable[[int], TraceEvent]] = None) -> TraceEvent:
    """The slice a flow event means: the one with that correlation, else the innermost."""
    if len(cands) == 1:
        return cands[0]
    for c in cands:
        if (c.args if whole is None else whole(c.index).args).get("correlation") == flow_id:
            return c
    return min(cands, key=lambda c: (c.dur_ns or 0, -c.index))
