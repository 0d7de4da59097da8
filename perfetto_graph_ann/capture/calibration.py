"""Calibration: one replay under a short CUPTI activity session.

Kineto of torch < 2.15 does not write ``graph node id`` into kernel events, so the join
needs another way to tell which node a replayed kernel is. Recording one replay of the
executable graph while CUPTI records GPU activity gives, per node key, the stream the
node runs on and its ordinal on that stream within a replay (which is fixed for one
executable graph). The table itself is built by the pure :func:`.resolve.calibration_table`.

The replay recorded is the user's own first eligible one (``api.graph`` wraps the graph's
``replay`` until then) or, on request, one of ``api.calibrate``'s: never a hidden one.

The session must not run while torch's profiler uses CUPTI's activity API (an active
session, or one prepared for its warm-up steps: :func:`profiler_active`); it is deferred
(:class:`CalibrationDeferred`) there. It registers its own buffer callbacks, which Kineto
registers again when the next profiler session starts, so a later profile is intact
(``tests/gpu/test_calibration_gpu.py`` checks it).
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from ..errors import CaptureError
from .nodewatch import WATCH
from .replay_log import REPLAY_LOG
from .resolve import ActivityRecord, calibration_table

__all__ = ["activity_session", "calibrate_replay", "CalibrationDeferred", "cupti_activity", "KINETO", "LAST_TIMES",
           "profiler_active", "records_from_activities"]

#: size of each activity buffer handed to CUPTI (a record is ~200 bytes; more buffers are
#: requested when a replay fills one)
_BUFFER_BYTES = 2 << 20
_session_lock = threading.Lock()
#: where the last calibration's time went (seconds per phase: synchronize before, session
#: start, replay + synchronize, session stop (flush, records read), table; and the record
#: count), for benchmarks/capture.py
LAST_TIMES: Dict[str, float] = {}


class CalibrationDeferred(CaptureError):
    """Calibration did not start and nothing was replayed for it: try again at a later replay."""


def records_from_activities(acts: Iterable[Any], kinds: Optional[Mapping[int, str]] = None,
                            exec_id: Optional[int] = None) -> List[ActivityRecord]:
    """cupti-python activity objects -> :class:`ActivityRecord`; records without a graph node are skipped.

    ``kinds`` maps an activity kind value to ``kernel`` / ``memcpy`` / ``memset``; records of
    other kinds are skipped when it is given. ``exec_id``: keep only that executable
    graph's records (a busy process records other work too).
    """
    out = []
    for a in acts:
        node = getattr(a, "graph_node_id", None)
        if not node or (exec_id is not None and node >> 32 != exec_id):
            continue
        stream = getattr(a, "stream_id", None)
        start = getattr(a, "start", None)
        if stream is None or start is None:
            continue
        kind = "kernel"
        if kinds is not None:
            kind = kinds.get(int(getattr(a, "kind", -1)))
            if kind is None:
                continue
        out.append(ActivityRecord(int(node), int(stream), int(start), int(getattr(a, "end", 0) or 0), kind))
    return out


class _KinetoWatch:
    """Counts torch profiler sessions that have been *prepared* and not yet stopped, and
    drives the replay log (:mod:`.replay_log`) at the profiler's prepare, start and stop.

    A ``torch.profiler.profile`` with a schedule prepares Kineto (CUPTI activity enabled,
    Kineto's buffer callbacks registered) during its warm-up steps, while torch's
    ``_profiler_enabled()`` still says False: a calibration then would take CUPTI's
    activity API from under it. torch has no query for that state, so ``_prepare_profiler``
    and ``_disable_profiler`` of ``torch.autograd.profiler`` (module globals its profile
    class calls) are wrapped once, on the first capture.
    """

    def __init__(self) -> None:
        self.prepared = 0
        self.installed = False
        self._lock = threading.Lock()
        #: called (and forgotten) when a profiler is next prepared: what must be said before it
        self.on_prepare: List[Callable[[], None]] = []

    def install(self) -> None:
        if self.installed:
            return
        with self._lock:
            if self.installed:
                return
            self.installed = True
            try:
                import torch.autograd.profiler as tap
            except Exception:
                return
            prep, disable = getattr(tap, "_prepare_profiler", None), getattr(tap, "_disable_profiler", None)
            enable = getattr(tap, "_enable_profiler", None)
            if prep is None or disable is None or getattr(prep, "_pga_watch", False):
                return
            log, clock = REPLAY_LOG, time.perf_counter_ns

            def _prepare_profiler(*a: Any, **k: Any) -> Any:
                self._run_on_prepare()
                self.prepared += 1
                log.prepared()
                WATCH.yield_to_profiler()  # CUPTI must be free when the profiler subscribes
                return prep(*a, **k)

            def _enable_profiler(*a: Any, **k: Any) -> Any:
                self._run_on_prepare()
                WATCH.yield_to_profiler()
                if not log.recording:
                    log.prepared()
                t0 = clock()
                out = enable(*a, **k)
                log.started(t0, clock())
                return out

            def _disable_profiler(*a: Any, **k: Any) -> Any:
                t0 = clock()
                try:
                    return disable(*a, **k)
                finally:
                    log.stopped(t0, clock())
                    self.prepared = 0  # Kineto holds one session at a time: stopped is stopped

            _prepare_profiler._pga_watch = True  # type: ignore[attr-defined]
            tap._prepare_profiler, tap._disable_profiler = _prepare_profiler, _disable_profiler
            if enable is not None:
                tap._enable_profiler = _enable_profiler

    def _run_on_prepare(self) -> None:
        while self.on_prepare:
            try:
                self.on_prepare.pop(0)()
            except Exception:
                pass


KINETO = _KinetoWatch()


def profiler_active() -> bool:
    """True while a torch.profiler / autograd profiler session runs or is prepared (warm-up)."""
    if KINETO.prepared:
        return True
    try:
        import torch
    except Exception:
        return False
    fn = getattr(getattr(getattr(torch, "_C", None), "_autograd", None), "_profiler_enabled", None)
    if fn is not None:
        with contextlib.suppress(Exception):
            return bool(fn())
    return bool(getattr(getattr(getattr(torch, "autograd", None), "profiler", None), "_is_profiler_enabled", False))


WATCH.profiler_active = profiler_active  # never detach CUPTI from under a profiler

_CUPTI: Optional[Tuple[Any, Dict[int, str], List[Any]]] = None


def _cupti() -> Tuple[Any, Dict[int, str], List[Any]]:
    """cupti-python's module, activity kind value -> our kind name, the kinds to enable (cached)."""
    global _CUPTI
    if _CUPTI is None:
        try:
            from cupti import cupti
        except Exception as e:  # pragma: no cover - exercised on GPU machines only
            raise CaptureError(f"calibration needs cupti-python (pip install cupti-python): {e}") from e
        names = {"CONCURRENT_KERNEL": "kernel", "MEMCPY": "memcpy", "MEMSET": "memset"}
        kinds = [getattr(cupti.ActivityKind, n) for n in names if hasattr(cupti.ActivityKind, n)]
        kind_of = {int(getattr(cupti.ActivityKind, n)): v for n, v in names.items() if hasattr(cupti.ActivityKind, n)}
        _CUPTI = (cupti, kind_of, kinds)
    return _CUPTI


@contextlib.contextmanager
def cupti_activity(collected: List[Any], exec_id: Optional[int] = None) -> Iterator[None]:
    """Record kernel, memcpy and memset activity (of ``exec_id`` only, if given) into ``collected``.

    Through cupti-python's own buffer callbacks, which build an object per record: the
    fallback of :func:`activity_session` where :mod:`.activity` cannot read its record layouts.
    """
    cupti, kind_of, kinds = _cupti()

    def requested():
        return _BUFFER_BYTES, 0

    def completed(acts):
        collected.extend(records_from_activities(acts, kind_of, exec_id))

    cupti.activity_register_callbacks(requested, completed)
    enabled = []
    try:
        for k in kinds:
            try:
                cupti.activity_enable(k)
                enabled.append(k)
            except Exception:
                if k == cupti.ActivityKind.CONCURRENT_KERNEL:
                    raise
        yield
    finally:
        with contextlib.suppress(Exception):
            cupti.activity_flush_all(1)
        for k in enabled:
            with contextlib.suppress(Exception):
                cupti.activity_disable(k)


def activity_session(collected: List[Any], exec_id: Optional[int] = None, libcupti: Optional[str] = None) -> Any:
    """The activity session calibration uses: :mod:`.activity`'s direct buffers, else :func:`cupti_activity`."""
    from . import activity

    try:
        api = activity.api(libcupti)
    except activity.LayoutError:
        return cupti_activity(collected, exec_id)
    return api.session(collected, exec_id)


def calibrate_replay(
    replay: Callable[[], None],
    synchronize: Callable[[], None],
    exec_id: int,
    session: Callable[..., Any] = cupti_activity,
    is_profiling: Callable[[], bool] = profiler_active,
    blocking: bool = True,
) -> Dict[int, Tuple[int, int]]:
    """Run ``replay`` once under an activity session; return exec key -> (stream, ordinal).

    Raises :class:`CalibrationDeferred` before anything is replayed when a profiler uses
    CUPTI, another calibration holds the session (``blocking=False``) or the activity
    session cannot start; :class:`CaptureError` when the replay ran but no record of the
    graph came back. ``session`` and ``is_profiling`` are injectable for tests.
    """
    if is_profiling():
        raise CalibrationDeferred("a torch.profiler session is active (or prepared) and uses CUPTI")
    if not _session_lock.acquire(blocking):
        raise CalibrationDeferred("another calibration is running")
    times: Dict[str, float] = {}
    collected: List[ActivityRecord] = []
    try:
        t0 = time.perf_counter()
        synchronize()
        with contextlib.ExitStack() as stack:
            t1 = time.perf_counter()
            stack.enter_context(WATCH.using())  # no detach meanwhile; one may follow
            try:
                stack.enter_context(session(collected, exec_id))
            except Exception as e:
                raise CalibrationDeferred(f"the CUPTI activity session could not start: {e}") from e
            t2 = time.perf_counter()
            replay()
            synchronize()
            t3 = time.perf_counter()
        t4 = time.perf_counter()
        times.update(sync_before=t1 - t0, start=t2 - t1, replay=t3 - t2, stop=t4 - t3)
    finally:
        _session_lock.release()
    t0 = time.perf_counter()
    table = calibration_table(collected, exec_id)
    times.update(table=time.perf_counter() - t0, records=len(collected))
    LAST_TIMES.clear()
    LAST_TIMES.update(times)
    if not table:
        raise CaptureError(f"calibration recorded no activity of executable graph {exec_id} "
                           f"({len(collected)} records)")
    return table
