"""Which executable graph each replay launched, recorded while a torch profiler records.

torch 2.11's Kineto writes no graph id on a ``cudaGraphLaunch`` or on the kernels it
launches, so graphs of identical structure (vLLM's piecewise graphs, one block captured for
several micro-batches) cannot be told apart from the trace. The process can: while a
profiler is prepared or recording, torch's ``CUDAGraph.replay`` is replaced at class level
by a function that appends, per call, the calling thread, the executable graph id and the
call's start and end on the monotonic clock. Every graph object goes through it, whoever
captured it and whether or not :func:`..api.graph` still wraps it. Outside a profiler
torch's own method is back in place: replays cost nothing then.

When the profiler stops, the calls are cut to those whose launch may be in the trace,
against the profiler's start (``_enable_profiler``) and stop (``_disable_profiler``):
a call that ended before the start, or began after the stop, is not in it; one that began
after the start and ended before the stop is; one that overlaps either edge (another
thread replaying while the profiler starts or stops) may be, and is kept as *uncertain*
at the head or tail of its thread's list. On the thread that starts or stops the profiler
nothing overlaps the edge. The join maps each thread's list onto that thread's launches in
the trace in order (:mod:`perfetto_graph_ann.join.launches`). The wrapper is
``_fastpath.ReplayLogger`` where the compiled path is built (a few hundred ns a replay), else a
Python function (same entries). Torch-free: tests drive it with stand-in graph classes.
"""
from __future__ import annotations

import collections
import os
import struct
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from ..annotations.model import UNANNOTATED_GRAPH, ReplayThread, ReplayWindow
from . import fastpath

__all__ = ["EDGE_GUARD_NS", "ENTRY", "Entry", "exec_id_of", "MAX_WINDOWS", "original_replay", "REPLAY_LOG", "ReplayLog"]

#: Profiler windows kept per process (the oldest go first): each is saved with the sidecar.
MAX_WINDOWS = 64
#: Margin (ns) around the profiler's start and stop within which a call of a thread other than
#: the one starting or stopping it counts as uncertain: the trace decides by its own clock.
EDGE_GUARD_NS = 200_000
#: Exec id logged for a call that raised (its launch may or may not have happened).
_FAILED = -1

Entry = Tuple[int, int, int, int, int]  #: (ident, native id, exec id, start, end) on the monotonic clock
#: The compiled wrapper's packed entry (``_replays.c``'s ``Entry``): the same five fields
ENTRY = struct.Struct("=Qqqqq")


def exec_id_of(graph: Any) -> int:
    """The executable graph id a replay of ``graph`` launches, as far as this package knows it:
    the id bound by :func:`..api.graph`, else :data:`UNANNOTATED_GRAPH`."""
    try:
        sess = graph.__dict__.get("_pga_session")
    except AttributeError:
        return UNANNOTATED_GRAPH
    if sess is None:
        return UNANNOTATED_GRAPH
    eid = sess._exec_id
    if eid is None:
        eid = sess.exec_id
    return eid if eid is not None else UNANNOTATED_GRAPH


class ReplayLog:
    """The replays of the current profiler window and the windows closed so far.

    ``clock`` (monotonic ns) and ``wall`` (Unix ns) are injectable for tests.
    """

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns, wall: Callable[[], int] = time.time_ns,
                 max_windows: int = MAX_WINDOWS):
        self.clock, self.wall = clock, wall
        self.windows: Deque[ReplayWindow] = collections.deque(maxlen=max_windows)
        self.entries: List[Entry] = []  #: the Python wrapper's entries
        self.packed = bytearray()  #: the compiled wrapper's entries (:data:`ENTRY` each)
        self._lock = threading.Lock()
        self._patched: Optional[Tuple[Any, Any]] = None  # (class, torch's replay)
        self._open = False
        self._start: Optional[Tuple[int, int, int]] = None  # (before, after, thread ident) of the start
        self._wall_offset = 0  # wall - clock, sampled at the start
        #: called (no arguments) after each window closes, e.g. to save the sidecar
        self.on_stop: List[Callable[[], Any]] = []

    # ---- the profiler's edges (calibration.KINETO calls these) --------------------------

    def prepared(self, graph_class: Any = None) -> None:
        """A profiler was prepared (warm-up begins, or the start follows): log replays from now."""
        with self._lock:
            if self._open:
                return
            self.entries = []
            self.packed = bytearray()
            self._start = None
            self._open = self._install(graph_class)

    def started(self, before: int, after: int, graph_class: Any = None) -> None:
        """The profiler's ``_enable_profiler`` ran between ``before`` and ``after`` (monotonic ns).

        Without a prepare first (a profiler that only enables), the log starts here: calls
        already in flight on other threads were not logged, which the join's check of each
        thread's counts catches."""
        if not self._open:
            self.prepared(graph_class)
        with self._lock:
            self._start = (before, after, threading.get_ident())
            self._wall_offset = self.wall() - self.clock()

    def stopped(self, before: int, after: int) -> None:
        """The profiler's ``_disable_profiler`` ran between ``before`` and ``after``: close the window."""
        with self._lock:
            if not self._open:
                return
            self._uninstall()
            self._open = False
            entries, self.entries = self.entries, []
            packed, self.packed = self.packed, bytearray()
            start, self._start = self._start, None
        entries = entries + [ENTRY.unpack_from(packed, i) for i in range(0, len(packed), ENTRY.size)]
        if start is not None:
            self.windows.append(self._window(entries, start, (before, after, threading.get_ident())))
            for cb in list(self.on_stop):
                try:
                    cb()
                except Exception:  # the profiler's stop must not fail for us
                    pass

    def snapshot(self) -> Tuple[ReplayWindow, ...]:
        """The closed windows, oldest first."""
        return tuple(self.windows)

    def clear(self) -> None:
        self.windows.clear()

    @property
    def recording(self) -> bool:
        return self._open

    # ---- the class-level wrapper ----------------------------------------------------------

    def _install(self, graph_class: Any) -> bool:
        if graph_class is None:
            graph_class = _torch_graph_class()
        if graph_class is None:
            return False
        orig = graph_class.__dict__.get("replay")
        if orig is None:
            return False
        orig = getattr(orig, "_pga_original", orig)
        c = fastpath.module()
        if c is not None and self.clock is time.perf_counter_ns:  # same clock: CLOCK_MONOTONIC
            self.packed = bytearray()
            logged = c.ReplayLogger(orig, self.packed)
        else:
            logged = _logged_replay(orig, self.entries.append, self.clock)
        try:
            graph_class.replay = logged
        except (TypeError, AttributeError):  # a class that takes no attributes (a C type)
            return False
        self._patched = (graph_class, orig)
        return True

    def _uninstall(self) -> None:
        if self._patched is not None:
            cls, orig = self._patched
            self._patched = None
            cls.replay = orig

    # ---- closing a window -------------------------------------------------------------------

    def _window(self, entries: List[Entry], start: Tuple[int, int, int], stop: Tuple[int, int, int]) -> ReplayWindow:
        s0, s1, s_thread = start
        d0, d1, d_thread = stop
        per_thread: Dict[int, List[Entry]] = {}
        for e in entries:
            per_thread.setdefault(e[0], []).append(e)
        threads = []
        for ident, calls in per_thread.items():
            gs = EDGE_GUARD_NS if ident != s_thread else 0
            gd = EDGE_GUARD_NS if ident != d_thread else 0
            kept: List[Tuple[Entry, str]] = []
            for c in calls:
                t_in, t_out = c[3], c[4]
                if t_out < s0 - gs or t_in > d1 + gd:
                    continue  # ended before the start or began after the stop: not in the trace
                inside = t_in > s1 + gs and t_out < d0 - gd
                kept.append((c, "in" if inside else ("head" if t_in <= s1 + gs else "tail")))
            if not kept:
                continue
            if any(c[2] == _FAILED for c, _ in kept):
                continue  # a call that raised: its launch may be missing, so the order says nothing
            kinds = [k for _, k in kept]
            n = len(kinds)
            if "in" in kinds:
                head = kinds.index("in")
                tail = n - 1 - max(i for i, k in enumerate(kinds) if k == "in")
                if any(k != "in" for k in kinds[head:n - tail]):
                    continue  # an uncertain call between certain ones: the clock went back; unusable
            else:
                head = tail = n  # all uncertain: any contiguous run may be the trace's
            threads.append(ReplayThread(
                ident=ident, native_id=calls[0][1], graphs=tuple(c[2] for c, _ in kept),
                head_uncertain=head, tail_uncertain=tail,
                starts_ns=tuple(c[3] + self._wall_offset for c, _ in kept)))
        return ReplayWindow(pid=os.getpid(), start_ns=s1 + self._wall_offset, stop_ns=d0 + self._wall_offset,
                            threads=tuple(threads))


def _logged_replay(orig: Callable, append: Callable[[Entry], None], clock: Callable[[], int]) -> Callable:
    ident, native = threading.get_ident, threading.get_native_id

    def replay(self, *args, **kwargs):
        t0 = clock()
        try:
            out = orig(self, *args, **kwargs)
        except BaseException:
            append((ident(), native(), _FAILED, t0, clock()))
            raise
        try:
            eid = exec_id_of(self)
        except Exception:  # never fail the user's replay: an unknown graph is only unlabelled
            eid = _FAILED
        append((ident(), native(), eid, t0, clock()))
        return out

    replay._pga_original = orig  # type: ignore[attr-defined]
    replay.__doc__ = getattr(orig, "__doc__", None)
    replay.__name__ = "replay"
    return replay


def _torch_graph_class() -> Any:
    """``torch.cuda.CUDAGraph`` if torch is imported (never imports it)."""
    import sys

    return getattr(getattr(sys.modules.get("torch"), "cuda", None), "CUDAGraph", None)


def original_replay(graph_class: Any) -> Callable:
    """torch's own ``replay`` of ``graph_class``, whether or not the log's wrapper is in place."""
    f = graph_class.replay
    return getattr(f, "_pga_original", f)


#: The process's log, driven by the profiler watch (:data:`..calibration.KINETO`).
REPLAY_LOG = ReplayLog()
