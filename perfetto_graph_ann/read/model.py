"""The event model between the Kineto reader and everything after it (join, write).

Times are integer nanoseconds, parsed from Kineto's microsecond decimals without
float rounding: ``ts_ns = Decimal(ts_text) * 1000`` rounded half up (only input finer
than Kineto's 3 decimals rounds at all), which is also what Perfetto's JSON importer
computes. They stay on the trace's own time base (the JSON
``ts``); absolute (Unix) time is ``KinetoTrace.base_time_ns + ts_ns``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Union

import msgspec

__all__ = ["CATEGORY_ALIASES", "GPU_WORK_CATEGORIES", "GRAPH_LAUNCH_NAMES", "KinetoTrace", "Pid", "Tid", "TraceEvent"]

Pid = Union[int, str]
Tid = Union[int, str]

#: Kineto categories of GPU work that a CUDA graph node can produce (lower case).
GPU_WORK_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: Older Kineto spellings mapped to the current ones.
CATEGORY_ALIASES = {"memcpy": "gpu_memcpy", "memset": "gpu_memset", "runtime": "cuda_runtime", "driver": "cuda_driver"}
#: Runtime / driver calls that launch a whole CUDA graph (one replay).
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch_ptsz"})


class TraceEvent(msgspec.Struct, gc=False):
    """One entry of ``traceEvents``, with exact integer times.

    ``index`` is the event's position in the file; it is the stable id every later
    stage uses (join placements are keyed by it, equal timestamps keep file order).

    A ``msgspec.Struct`` rather than a dataclass so the reader can decode the JSON straight
    into these objects (``read/events.py``) instead of building one per event afterwards.
    Use :meth:`replace` for a modified copy (``dataclasses.replace`` does not apply). Not
    tracked by the cyclic GC (``gc=False``): an event never refers back to itself.
    """

    index: int
    ph: str
    cat: str  #: as written in the file ("" when absent)
    name: str
    pid: Pid
    tid: Tid
    ts_ns: Optional[int]  #: None for metadata events without ts
    dur_ns: Optional[int] = None  #: complete events ('X') only
    args: Dict[str, Any] = msgspec.field(default_factory=dict)
    id: Optional[Union[int, str]] = None  #: flow / async id ('s', 'f', 'b', 'e', ...)
    extra: Optional[Dict[str, Any]] = None  #: other top-level keys ('bp', 's', 'id2', ...)

    def replace(self, **changes: Any) -> "TraceEvent":
        """A copy with ``changes`` applied (what ``dataclasses.replace`` did for the dataclass)."""
        return msgspec.structs.replace(self, **changes)

    @property
    def category(self) -> str:
        """Lower-case category with old Kineto spellings normalised."""
        c = self.cat.lower()
        return CATEGORY_ALIASES.get(c, c)

    @property
    def is_gpu_work(self) -> bool:
        """A kernel, memcpy or memset that ran on a GPU stream."""
        return self.ph == "X" and self.category in GPU_WORK_CATEGORIES

    @property
    def device(self) -> Optional[int]:
        """GPU index of GPU events (``args.device``, else the pid Kineto uses for the GPU)."""
        d = self.args.get("device")
        if isinstance(d, int) and not isinstance(d, bool):
            return d
        return self.pid if isinstance(self.pid, int) and not isinstance(self.pid, bool) else None

    @property
    def stream(self) -> Optional[int]:
        """CUDA stream id of GPU events (``args.stream``, else the tid)."""
        s = self.args.get("stream")
        if isinstance(s, int) and not isinstance(s, bool):
            return s
        return self.tid if isinstance(self.tid, int) and not isinstance(self.tid, bool) else None

    @property
    def correlation(self) -> Optional[int]:
        """CUPTI correlation id linking a launch to its GPU work (``args.correlation``)."""
        c = self.args.get("correlation")
        return c if isinstance(c, int) and not isinstance(c, bool) else None

    @property
    def end_ns(self) -> Optional[int]:
        if self.ts_ns is None:
            return None
        return self.ts_ns + (self.dur_ns or 0)


@dataclasses.dataclass
class KinetoTrace:
    """A whole torch.profiler Chrome trace, read exactly.

    ``metadata`` holds every top-level key except ``traceEvents`` (schemaVersion,
    deviceProperties, distributedInfo, baseTimeNanoseconds, ...), unchanged.
    """

    path: Optional[str]
    events: List[TraceEvent]
    metadata: Dict[str, Any]

    @property
    def base_time_ns(self) -> int:
        """Unix time (ns) of ts == 0; 0 when the trace does not say."""
        b = self.metadata.get("baseTimeNanoseconds")
        return int(b) if isinstance(b, int) and not isinstance(b, bool) else 0

    @property
    def device_properties(self) -> List[Mapping[str, Any]]:
        p = self.metadata.get("deviceProperties")
        return p if isinstance(p, list) else []

    @property
    def distributed_info(self) -> Optional[Mapping[str, Any]]:
        d = self.metadata.get("distributedInfo")
        return d if isinstance(d, dict) else None

    def gpu_work(self) -> List[TraceEvent]:
        """Kernel, memcpy and memset events in file order."""
        return [e for e in self.events if e.is_gpu_work]
