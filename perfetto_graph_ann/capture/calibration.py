"""Calibration: one replay under a short CUPTI activity session.

Kineto of torch < 2.15 does not write ``graph node id`` into kernel events, so the join
needs another way to tell which node a replayed kernel is. Replaying the executable
graph once while CUPTI records GPU activity gives, per node key, the stream the node
runs on and its ordinal on that stream within a replay (which is fixed for one
executable graph). The table itself is built by the pure :func:`.resolve.calibration_table`.

The session must not run inside a ``torch.profiler`` session (both use CUPTI's activity
API); it is refused there. It registers its own buffer callbacks, which Kineto registers
again when the next profiler session starts, so a later profile is intact (measured on
the H200, see the fixtures README and tests/gpu).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from ..errors import CaptureError
from .resolve import ActivityRecord, calibration_table

_BUFFER_BYTES = 8 << 20
_session_lock = threading.Lock()


def records_from_activities(acts: Iterable[Any], kinds: Optional[Mapping[int, str]] = None) -> List[ActivityRecord]:
    """cupti-python activity objects -> :class:`ActivityRecord`; records without a graph node are skipped.

    ``kinds`` maps an activity kind value to ``kernel`` / ``memcpy`` / ``memset``; records of
    other kinds are skipped when it is given.
    """
    out = []
    for a in acts:
        node = getattr(a, "graph_node_id", None)
        stream = getattr(a, "stream_id", None)
        start = getattr(a, "start", None)
        if not node or stream is None or start is None:
            continue
        kind = "kernel"
        if kinds is not None:
            kind = kinds.get(int(getattr(a, "kind", -1)))
            if kind is None:
                continue
        out.append(ActivityRecord(int(node), int(stream), int(start), int(getattr(a, "end", 0) or 0), kind))
    return out


def profiler_active() -> bool:
    """True while a torch.profiler / autograd profiler session is running in this process."""
    try:
        import torch
    except Exception:
        return False
    fn = getattr(getattr(torch._C, "_autograd", None), "_profiler_enabled", None)
    if fn is not None:
        with contextlib.suppress(Exception):
            return bool(fn())
    return bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))


@contextlib.contextmanager
def cupti_activity(collected: List[Any]) -> Iterator[None]:
    """Record kernel, memcpy and memset activity into ``collected`` for the duration."""
    try:
        from cupti import cupti
    except Exception as e:  # pragma: no cover - exercised on GPU machines only
        raise CaptureError(f"calibration needs cupti-python (pip install cupti-python): {e}") from e

    def requested():
        return _BUFFER_BYTES, 0

    names = {"CONCURRENT_KERNEL": "kernel", "MEMCPY": "memcpy", "MEMSET": "memset"}
    kind_of = {int(getattr(cupti.ActivityKind, n)): v for n, v in names.items() if hasattr(cupti.ActivityKind, n)}

    def completed(acts):
        collected.extend(records_from_activities(acts, kind_of))

    kinds = [getattr(cupti.ActivityKind, n) for n in names if hasattr(cupti.ActivityKind, n)]
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


def calibrate_replay(
    replay: Callable[[], None],
    synchronize: Callable[[], None],
    exec_id: int,
    session: Callable[[List[Any]], Any] = cupti_activity,
    is_profiling: Callable[[], bool] = profiler_active,
) -> Dict[int, Tuple[int, int]]:
    """Replay once under an activity session; return exec key -> (stream, ordinal).

    Raises :class:`CaptureError` inside a profiler session or when no record of the graph
    came back. ``session`` and ``is_profiling`` are injectable for tests.
    """
    if is_profiling():
        raise CaptureError("calibration refused: a torch.profiler session is active; "
                           "capture (or call calibrate()) before starting the profiler")
    collected: List[ActivityRecord] = []
    with _session_lock:
        synchronize()
        with session(collected):
            replay()
            synchronize()
    table = calibration_table(collected, exec_id)
    if not table:
        raise CaptureError(f"calibration recorded no activity of executable graph {exec_id} "
                           f"({len(collected)} records of other work)")
    return table
