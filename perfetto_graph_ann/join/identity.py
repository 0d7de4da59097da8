"""Do the annotations belong to this trace? Their :class:`CaptureIdentity` against the trace.

Compared where both sides record the field (a Kineto trace has no host name, process start
time or device UUID, so those are not compared):

- **pid**: the sidecar's process must be one of the processes that launched graphs in the
  trace (``cudaGraphLaunch`` events; without any, the processes with CUDA runtime calls).
  Executable graph ids are per process, so annotations from another process name other
  graphs even when the ids happen to agree.
- **device names** per CUDA device index (Kineto's ``deviceProperties``).
- **CUDA driver version** (``cuDriverGetVersion``; Kineto's ``cuda_driver_version``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set

from ..annotations.model import CaptureIdentity
from ..read.model import GRAPH_LAUNCH_NAMES, KinetoTrace, TraceEvent

__all__ = ["compared_fields", "differences", "trace_device_names", "trace_pids"]

#: Kineto categories of host-side events that carry the profiled process's pid.
_HOST_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def trace_pids(trace: KinetoTrace, launches: Optional[Sequence[TraceEvent]] = None) -> Set[int]:
    """The pids that launched graphs in ``trace`` (else that made CUDA runtime / driver calls).
    ``launches``: the trace's graph launch events where the caller has them (a pass over every
    event saved: :func:`~.replays.gpu_work_and_replays`' ``every_launch``)."""
    launch: Set[int] = set()
    for e in trace.events if launches is None else launches:  # launches first: a name lookup, no category to normalise
        if e.ph == "X" and e.name in GRAPH_LAUNCH_NAMES and _is_int(e.pid):
            launch.add(e.pid)
    if launch:
        return launch
    host: Set[int] = set()
    for e in trace.events:
        if _is_int(e.pid) and e.category in _HOST_CATEGORIES:
            host.add(e.pid)
    return host


def trace_device_names(trace: KinetoTrace) -> Dict[int, str]:
    """CUDA device index -> name from the trace's ``deviceProperties``."""
    out: Dict[int, str] = {}
    for d in trace.device_properties:
        if isinstance(d, dict) and _is_int(d.get("id")) and isinstance(d.get("name"), str):
            out[d["id"]] = d["name"]
    return out


def differences(identity: CaptureIdentity, trace: KinetoTrace, pids: Optional[Set[int]] = None) -> List[str]:
    """What the identity and the trace disagree on, one readable item per field; [] when they
    agree. ``pids``: :func:`trace_pids` where the caller has it (a pass over every event)."""
    out: List[str] = []
    pids = trace_pids(trace) if pids is None else pids
    if identity.pid is not None and pids and identity.pid not in pids:
        shown = ", ".join(map(str, sorted(pids)))
        out.append(f"pid: annotations {identity.pid}, trace {shown}")
    names = trace_device_names(trace)
    for i in sorted(set(identity.device_names) & set(names)):
        if identity.device_names[i] != names[i]:
            out.append(f"device {i}: annotations {identity.device_names[i]!r}, trace {names[i]!r}")
    drv = trace.metadata.get("cuda_driver_version")
    if identity.cuda_driver_version is not None and _is_int(drv) and drv != identity.cuda_driver_version:
        out.append(f"CUDA driver version: annotations {identity.cuda_driver_version}, trace {drv}")
    return out


def compared_fields(identity: Optional[CaptureIdentity], trace: KinetoTrace,
                    pids: Optional[Set[int]] = None) -> List[str]:
    """The fields :func:`differences` could compare for this pair (both sides record them);
    ``pids`` as there."""
    if identity is None:
        return []
    fields = []
    if identity.pid is not None and (trace_pids(trace) if pids is None else pids):
        fields.append("pid")
    if set(identity.device_names) & set(trace_device_names(trace)):
        fields.append("device names")
    if identity.cuda_driver_version is not None and _is_int(trace.metadata.get("cuda_driver_version")):
        fields.append("CUDA driver version")
    return fields
