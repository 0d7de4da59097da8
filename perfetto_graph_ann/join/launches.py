"""Which graph each launch in a trace replayed, from the process's replay record.

The record (:class:`~perfetto_graph_ann.annotations.model.ReplayWindow`, written by
``capture/replay_log.py``) lists, per profiler window and thread, the executable graph of
every replay call in call order, with the calls that overlapped the profiler's start or
stop marked uncertain at the head and tail. A thread's graph launches in the trace are its
calls, in the same order: the i-th launch on the thread is call ``k + i`` for one offset
``k``. The offsets that agree with everything known are kept:

- **counts**: the launches must cover every certain call and nothing outside the list
  (``k <= head_uncertain`` and ``k + m >= n - tail_uncertain``);
- **times**, where both sides have them: each launch starts within :data:`TIME_SLACK_NS`
  of its call (a check against gross misalignment), and between its call's start and the
  next call's on that thread (a thread's calls run one after the other), within
  :data:`ORDER_SLACK_NS` and :data:`ORDER_DRIFT_PPM` for the two clocks. A window none of
  whose threads' calls can be so placed around the trace's launches is not the trace's;
- **kernels**: a launch of an annotated graph must have GPU work that graph can have run.

A launch's graph is known when every kept offset gives the same graph; otherwise it is
one of those candidates. A thread whose launches no offset fits (dropped events, a call
that raised, a record of another run) tells nothing, and the report says so. The record's
thread is found by Kineto's tid: the thread's native id where the trace has CPU events,
else ``pthread_self`` as a 32-bit int (:func:`kineto_tids`).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ..annotations.model import UNANNOTATED_GRAPH, ReplayThread, ReplayWindow
from ..read.model import GRAPH_LAUNCH_NAMES, KinetoTrace, TraceEvent
from .identity import trace_pids

#: How far (ns) a launch's start may be from its call's start before an offset is refused:
#: the trace's clock and the process's are not the same, only close.
TIME_SLACK_NS = 50_000_000
#: How far (ns) a launch may start before its call's recorded start, or after the start of the
#: thread's next call (a launch lies between the two: a thread's calls run one after the other).
#: The trace's clock and the process's were 3-7 us apart on the H200 and H100 (a first call
#: under a new profiler reached its launch 1.6-2.4 ms after it began, inside that bracket).
ORDER_SLACK_NS = 1_000_000
#: ...plus this many ns per ms elapsed since the thread's first recorded call (1,000 ppm: two
#: clocks drifting apart over a long profile)
ORDER_DRIFT_PPM = 1_000
#: How far (ns) outside a window's start and stop the trace's launches may lie and still be its
#: (the H200 showed the two clocks microseconds apart; profiler windows are seconds apart).
WINDOW_SLACK_NS = 250_000_000
#: Where several windows fit one trace (profiler windows a few ms apart: short cycles, a quick
#: export between two profiles), the one holding the trace's launches within this (ns; the two
#: clocks are microseconds apart) is the trace's, and windows whose span misses a launch by more
#: than :data:`WINDOW_APART_NS` are not: they are left out. Windows in between stay (their
#: candidates join, so a launch they disagree on stays unknown).
WINDOW_HOLDS_NS = 1_000_000
WINDOW_APART_NS = 10_000_000

#: launch correlation -> the graphs it may have launched (one: known)
Candidates = Dict[int, FrozenSet[int]]


@dataclasses.dataclass
class LaunchIdentities:
    """What the record says of a trace's launches."""

    graphs: Candidates = dataclasses.field(default_factory=dict)
    #: Why (parts of) the record could not be used, one readable line each.
    problems: List[str] = dataclasses.field(default_factory=list)


def _launches(trace: KinetoTrace, every_launch: Optional[Sequence[TraceEvent]] = None) -> Dict[int, List[TraceEvent]]:
    """tid -> graph launch events in start order. Runtime spellings only where a thread has
    both (a driver launch inside a runtime launch is the same replay). ``every_launch``: the
    trace's launch events, where the caller has them (else every event is looked at)."""
    per_tid: Dict[int, List[TraceEvent]] = {}
    for e in trace.events if every_launch is None else every_launch:
        if e.ph == "X" and e.name in GRAPH_LAUNCH_NAMES and e.correlation is not None and isinstance(e.tid, int):
            per_tid.setdefault(e.tid, []).append(e)
    for tid, evs in per_tid.items():
        runtime = [e for e in evs if e.name.startswith("cuda")]
        if runtime and len(runtime) != len(evs):
            evs = runtime
        per_tid[tid] = sorted(evs, key=lambda e: (e.ts_ns if e.ts_ns is not None else 0, e.index))
    return per_tid


def kineto_tids(ident: int, native_id: Optional[int]) -> FrozenSet[int]:
    """The tids Kineto may give a thread's runtime events: its native id (where the thread has
    CPU ops), else ``pthread_self`` as a 32-bit int, which the H200 traces show written as
    its absolute value (``ident & 0xFFFFFFFF`` read as signed, then made positive)."""
    low = ident & 0xFFFFFFFF
    signed = low - (1 << 32) if low >= 1 << 31 else low
    out = {low, signed, abs(signed)}
    if native_id is not None:
        out.add(native_id)
    return frozenset(out)


def _thread_for(tid: int, threads: Sequence[ReplayThread]) -> Optional[ReplayThread]:
    found = [t for t in threads if tid in kineto_tids(t.ident, t.native_id)]
    return found[0] if len(found) == 1 else None


def _offsets(t: ReplayThread, m: int) -> range:
    n = len(t.graphs)
    return range(max(0, n - t.tail_uncertain - m), min(t.head_uncertain, n - m) + 1)


def _times_fit(t: ReplayThread, k: int, launches: Sequence[TraceEvent], base_ns: int) -> bool:
    """Whether launch ``i`` can be call ``k + i`` by time: near its start, and between it and the
    next call's start (the order slack, with drift)."""
    starts = t.starts_ns
    if not starts or not base_ns:
        return True
    first = starts[0]
    for i, e in enumerate(launches):
        if e.ts_ns is None:
            continue
        at, j = base_ns + e.ts_ns, k + i
        if abs(at - starts[j]) > TIME_SLACK_NS:
            return False
        slack = ORDER_SLACK_NS + abs(at - first) * ORDER_DRIFT_PPM // 1_000_000
        if at < starts[j] - slack or (j + 1 < len(starts) and at > starts[j + 1] + slack):
            return False
    return True


def _fit_window(w: ReplayWindow, per_tid: Mapping[int, List[TraceEvent]], base_ns: int,
                fits_graph: Callable[[int, int], bool]) -> Tuple[Optional[Candidates], List[str]]:
    """The candidates this window gives each launch, or None when the window is not this trace's."""
    out: Candidates = {}
    problems: List[str] = []
    used = set()
    counted = timed = False  # some thread's calls cover its launches by count / also by time
    for tid, launches in per_tid.items():
        t = _thread_for(tid, w.threads)
        if t is None:
            problems.append(f"thread {tid}: no replay recorded for it ({len(launches)} graph launches left to "
                            "the kernels)")
            continue
        used.add(id(t))
        m = len(launches)
        ks = list(_offsets(t, m))
        counted = counted or bool(ks)
        ks = [k for k in ks if _times_fit(t, k, launches, base_ns)]
        timed = timed or bool(ks)
        ks = [k for k in ks if all(fits_graph(e.correlation, t.graphs[k + i]) for i, e in enumerate(launches))]
        if not ks:
            n = len(t.graphs)
            problems.append(f"thread {tid}: {m} graph launches in the trace, {n} replays recorded "
                            f"({t.head_uncertain} uncertain at the start, {t.tail_uncertain} at the end): no order "
                            "fits (dropped events or another run); its launches are left to the kernels")
            continue
        for i, e in enumerate(launches):
            out[e.correlation] = frozenset(t.graphs[k + i] for k in ks)
    for t in w.threads:
        if id(t) not in used and len(t.graphs) > t.head_uncertain + t.tail_uncertain:
            return None, [f"the record has replays of thread {t.ident} that the trace lacks"]
    if not used:  # none of the trace's launching threads replayed in this window: not its window
        return None, []
    if counted and not timed:  # its calls ran at other times than the trace's launches: not its window
        return None, []
    return out, problems


def launch_identities(trace: KinetoTrace, windows: Iterable[ReplayWindow],
                      fits_graph: Callable[[int, int], bool] = lambda corr, graph: True,
                      pids: Optional[Set[int]] = None,
                      every_launch: Optional[Sequence[TraceEvent]] = None) -> LaunchIdentities:
    """Candidates per launch correlation from the record's windows of this trace's process.

    ``fits_graph(correlation, exec id)``: whether the launch's GPU work could be that graph's
    (the join passes a check of the kernels against annotated graphs). Windows of other
    processes, or whose span does not hold the trace's launches, are not used; where several
    windows fit, one that holds them (:data:`WINDOW_HOLDS_NS`) leaves out those that miss them
    (:data:`WINDOW_APART_NS`), and a launch's candidates are the union of the rest's. ``pids``: :func:`trace_pids`,
    ``every_launch``: the trace's graph launch events, where the caller has them.
    """
    per_tid = _launches(trace, every_launch)
    res = LaunchIdentities()
    if not per_tid:
        return res
    pids = trace_pids(trace, every_launch) if pids is None else pids
    base = trace.base_time_ns
    times = [base + e.ts_ns for evs in per_tid.values() for e in evs if e.ts_ns is not None] if base else []
    lo, hi = (min(times), max(times)) if times else (None, None)
    found: List[Tuple[Candidates, List[str], Optional[int]]] = []  # (candidates, problems, ns the span misses by)
    for w in windows:
        if w.pid is not None and pids and w.pid not in pids:
            continue
        if lo is not None and (lo < w.start_ns - WINDOW_SLACK_NS or hi > w.stop_ns + WINDOW_SLACK_NS):
            continue
        got, why = _fit_window(w, per_tid, base, fits_graph)
        if got is not None:
            found.append((got, why, None if lo is None else max(0, w.start_ns - lo, hi - w.stop_ns)))
    if len(found) > 1 and all(m is not None for _, _, m in found) and min(m for _, _, m in found) <= WINDOW_HOLDS_NS:
        found = [f for f in found if f[2] <= WINDOW_APART_NS]  # the windows of other profiles, just before or after
    fitting = [got for got, _, _ in found]
    problems = [p for _, why, _ in found for p in why]
    if not fitting:
        res.problems.append("no profiler window of the replay record fits this trace's graph launches: "
                            "graphs are told apart by their kernels alone")
        return res
    merged: Dict[int, set] = {}
    for cands in fitting:
        for corr, gs in cands.items():
            merged.setdefault(corr, set()).update(gs)
    if len(fitting) > 1:
        # a launch some fitting window does not cover may be any graph
        covered = set.intersection(*(set(c) for c in fitting))
        merged = {c: gs for c, gs in merged.items() if c in covered}
    res.graphs = {c: frozenset(gs) for c, gs in merged.items()}
    res.problems = list(dict.fromkeys(problems))
    return res


__all__ = ["LaunchIdentities", "launch_identities", "ORDER_DRIFT_PPM", "ORDER_SLACK_NS", "TIME_SLACK_NS",
           "UNANNOTATED_GRAPH"]
