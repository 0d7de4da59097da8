"""Group a trace's graphed GPU work into replays.

Every kernel of one replay carries the ``correlation`` of its ``cudaGraphLaunch``
(fixtures README), so a replay is "the GPU work whose correlation is a graph launch's".
Events that carry ``graph id`` / ``graph node id`` args but whose launch is missing from
the trace (window cut) still form a replay keyed by their correlation.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Dict, List, Optional, Sequence, Set, Tuple

from .. import settings
from ..read.model import GRAPH_LAUNCH_NAMES, KinetoTrace, TraceEvent

__all__ = ["by_start", "dim3_arg", "EVENT_NODE_TYPE", "find_replays", "gpu_work_and_replays", "group_work",
           "GROUP_WORK", "IN_START_ORDER", "int_arg", "node_type_of", "Replay"]

try:  # gpu_work_and_replays' pass over the events in C (join/_rows.c, built by hatch_build.py)
    from ._rows import group_work as _compiled_group_work, in_start_order as _compiled_in_start_order
except ImportError:
    _compiled_group_work = _compiled_in_start_order = None
#: :func:`gpu_work_and_replays`' pass over a trace's events in C, or None where it is not built or
#: ``PERFETTO_GRAPH_ANN_PURE_PYTHON`` was set at import (the Python loop then)
GROUP_WORK = None if settings.switch(settings.PURE_PYTHON) else _compiled_group_work
#: Whether a list of events is already in :func:`by_start`'s order (then it is not sorted), in C
#: with :data:`GROUP_WORK`, or None
IN_START_ORDER = None if GROUP_WORK is None else _compiled_in_start_order

#: Kineto category -> capture node type
EVENT_NODE_TYPE = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


def node_type_of(event: TraceEvent) -> str:
    return EVENT_NODE_TYPE.get(event.category, "other")


def int_arg(event: TraceEvent, key: str) -> Optional[int]:
    """An integer arg, also accepting decimal strings (some Kineto builds write ids as text)."""
    v = event.args.get(key)
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


def dim3_arg(event: TraceEvent, key: str) -> Optional[Tuple[int, ...]]:
    v = event.args.get(key)
    if type(v) is list:
        if len(v) == 3:  # what Kineto writes: no generator
            a, b, c = v
            return (a, b, c) if type(a) is int and type(b) is int and type(c) is int else None
        t = tuple(v)
        if all(type(x) is int for x in t):
            return t
    return None


@dataclasses.dataclass
class Replay:
    """One graph launch and the GPU work it produced."""

    correlation: int
    launch: Optional[TraceEvent]
    events: List[TraceEvent]  #: sorted by (ts_ns, index)
    #: event index -> loose signature, computed once per join (``match.replay_signatures``)
    signatures: Optional[Dict[int, Tuple]] = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def device(self) -> Optional[int]:
        return self.events[0].device if self.events else None

    @property
    def start_ns(self) -> int:
        if self.launch is not None and self.launch.ts_ns is not None:
            return self.launch.ts_ns
        return min((e.ts_ns or 0) for e in self.events) if self.events else 0

    def ordinals(self, kernels_only: bool = False) -> Dict[int, Tuple[int, int]]:
        """event index -> (stream, ordinal of the event on that stream within this replay).

        ``kernels_only`` counts kernels alone (for calibrations taken from kernel
        activity records only); other events are then left out.
        """
        counters: Dict[Optional[int], int] = {}
        out: Dict[int, Tuple[int, int]] = {}
        for e in self.events:
            if kernels_only and e.cat != "kernel" and e.category != "kernel":
                continue
            s = e.args.get("stream")
            if type(s) is not int:  # else the property's rule (bool, tid)
                s = e.stream
                if s is None:
                    continue
            k = counters.get(s, 0)
            counters[s] = k + 1
            out[e.index] = (s, k)
        return out


def _is_gpu_work(e: TraceEvent) -> bool:
    """``TraceEvent.is_gpu_work`` (its category's test), for the compiled pass."""
    return e.is_gpu_work


_START_AND_INDEX = operator.attrgetter("ts_ns", "index")


def by_start(events: List[TraceEvent]) -> List[TraceEvent]:
    """``events`` by (start, file index), an untimed one as if at 0: the key made in C, and the
    key with the rule for None only where an event has no time (None and an int do not compare).
    A replay's events, grouped in file order, are mostly in that order already: returned as they are."""
    if IN_START_ORDER is not None and type(events) is list and IN_START_ORDER(events):
        return events
    try:
        return sorted(events, key=_START_AND_INDEX)
    except TypeError:
        return sorted(events, key=lambda e: (e.ts_ns or 0, e.index))


def find_replays(trace: KinetoTrace) -> List[Replay]:
    """Every replay in the trace, in launch order (launch ts, then correlation)."""
    return gpu_work_and_replays(trace)[1]


def gpu_work_and_replays(trace: KinetoTrace,
                         every_launch: Optional[List[TraceEvent]] = None) -> Tuple[int, List[Replay]]:
    """(how many GPU work events the trace has, :func:`find_replays`' replays): one pass, which
    also appends every graph launch event (``ph`` X, a launch name) in file order to
    ``every_launch`` when given (the launch identities and the identity check need them)."""
    launches: Dict[int, TraceEvent] = {}
    # one pass: launches, and GPU work by correlation (file order), then the groups that are replays
    work: Dict[int, List[TraceEvent]] = {}
    graph_ids: Set[int] = set()  # correlations with an event carrying graph ids
    total = group_work(trace.events, launches, work, graph_ids, every_launch)
    replays = []
    for c, evs in work.items():
        if c not in launches:
            if c not in graph_ids:
                continue
            evs = [e for e in evs if "graph node id" in e.args or "graph id" in e.args]  # no launch: those alone
        replays.append(Replay(c, launches.get(c), by_start(evs)))
    replays.sort(key=lambda r: (r.start_ns, r.correlation))
    return total, replays


def group_work(events: Sequence[TraceEvent], launches: Dict[int, TraceEvent], work: Dict[int, List[TraceEvent]],
               graph_ids: Set[int], every_launch: Optional[List[TraceEvent]] = None) -> int:
    """:func:`gpu_work_and_replays`' pass over ``events``: the first graph launch (``ph`` X, a
    launch name) of each correlation into ``launches``, every one into ``every_launch`` (when
    given), the GPU work by correlation into ``work`` (file order, appended to what is there)
    and the correlations whose work carries graph ids into ``graph_ids``; returns how many GPU
    work events it met. Passes over successive parts of a trace add up to one over the whole."""
    launch_names = GRAPH_LAUNCH_NAMES
    is_work: Dict[str, bool] = {}  # cat as written -> TraceEvent.is_gpu_work's category test
    total = 0
    if GROUP_WORK is not None and type(events) is list:  # the same pass in C
        total = GROUP_WORK(events, (launch_names, is_work, _is_gpu_work, launches, work, graph_ids, every_launch))
        events = ()
    for e in events:
        if e.ph != "X":  # both a launch and GPU work are complete events
            continue
        if e.name in launch_names:
            if every_launch is not None:
                every_launch.append(e)
            c = e.correlation
            if c is not None and c not in launches:
                launches[c] = e
        w = is_work.get(e.cat)
        if w is None:
            w = is_work[e.cat] = e.is_gpu_work
        if not w:
            continue
        total += 1
        a = e.args
        c = a.get("correlation")
        if type(c) is not int:  # else the property's rule
            c = e.correlation
            if c is None:
                continue
        evs = work.get(c)
        if evs is None:
            evs = work[c] = []
        evs.append(e)
        if "graph node id" in a or "graph id" in a:
            graph_ids.add(c)
    return total
