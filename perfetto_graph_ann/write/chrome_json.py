"""Annotated Chrome JSON: the join written back as torch 2.15's exporter writes it.

For HTA and TensorBoard users, and for anyone switching between this package and torch
2.15's ``prof.export_chrome_trace(path, cuda_graph_annotations=..., graph_lanes=...)``: the
events come out as torch writes them (checked event by event against torch 2.15's output
on the shipped fixtures, ``tests/test_chrome_json_torch215.py``):

- annotation fields are written with ``str()`` (``"3"``, ``"True"``, ``"[1, 2]"``); the
  ``stream`` field is not written, it names the lane;
- with ``graph_lanes="all"`` a graphed event moves to its annotation's lane, else to
  ``default_stream``; a moved event gets ``tid`` and ``args.stream`` = the lane and
  ``original_stream`` = where it ran; an event that stays where its annotation asked for
  another lane gets ``annotated_stream``;
- a new lane is named by the annotation's ``Process Group Description``, else
  ``"stream N "`` (trailing space, as Kineto names streams); a real stream keeps its name;
- ``"cudaGraphInlineAnnotated": true`` before ``traceEvents`` when any event matched an
  annotated node;
- ``gpu_user_annotation`` events are never moved and keep their args (``External id``); when
  an event matched an annotated node they are held back, as torch's ``deferred_annotations``:
  written after the profile's other activities, and only where their lane (pid, tid) has GPU
  work after the moves (on a lane whose work all moved away they are noise CUPTI replicated).

Our own args come on top: ``graph id`` and ``graph node id`` where Kineto did not write
them, ``replay``, ``join`` and ``join_ambiguous``. The incoming ``ac2g`` flow end of a moved
event moves with it. Times are written back exactly (``ts_ns`` as a 3-decimal microsecond
number, no float rounding). Typed values and descriptive lane names are the ``.pftrace``'s.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any, Dict, List, Mapping, Optional, Tuple

import msgspec

from ..errors import PathLike
from ..join.model import LaneLayout
from ..read.model import KinetoTrace, TraceEvent
from ..util.atomic import atomic_write_bytes

__all__ = ["write_chrome_json", "annotated_events", "torch_annotation_args", "INLINE_ANNOTATED_KEY"]

_encoder = msgspec.json.Encoder(decimal_format="number")


def _us(ns: int) -> Decimal:
    """Integer ns -> exact microseconds (``Decimal`` with 3 decimals, as Kineto writes)."""
    return Decimal(ns).scaleb(-3)


def _event_dict(e: TraceEvent, tid: Any = None, args: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    d: Dict[str, Any] = {"ph": e.ph}
    if e.cat:
        d["cat"] = e.cat
    d["name"] = e.name
    d["pid"] = e.pid
    d["tid"] = e.tid if tid is None else tid
    if e.ts_ns is not None:
        d["ts"] = _us(e.ts_ns)
    if e.dur_ns is not None:
        d["dur"] = _us(e.dur_ns)
    if e.id is not None:
        d["id"] = e.id
    if e.extra:
        for k, v in e.extra.items():
            d.setdefault(k, v)
    a = e.args if args is None else args
    if a:
        d["args"] = a
    return d


#: Kineto categories torch 2.15 moves and annotates (gpu_user_annotation follows the work).
_WORK_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: The annotation key naming a lane (torch 2.15: a process group's lane).
_LANE_NAME_KEY = "Process Group Description"
#: Envelope key torch 2.15 writes when annotations were baked in.
INLINE_ANNOTATED_KEY = "cudaGraphInlineAnnotated"
#: Our args on top of torch's, in the order they are written (the critical path's: join.critical_path).
OUR_ARGS = ("replay", "join", "join_ambiguous", "critical path", "critical path slack ns")


def torch_annotation_args(annotation: Mapping[str, Any]) -> Tuple[Dict[str, str], Optional[int], Optional[str]]:
    """One node's annotation as torch 2.15 renders it: (args with ``str()`` values, the
    lane its int ``stream`` field names, the lane name from its process group description)."""
    args: Dict[str, str] = {}
    stream = lane_name = None
    for key, value in annotation.items():
        if key != "stream":
            args[str(key)] = str(value)
        elif isinstance(value, int) and not isinstance(value, bool):  # the join's rule (NodeRecord.lane)
            stream = value
    if _LANE_NAME_KEY in annotation:
        lane_name = str(annotation[_LANE_NAME_KEY])
    return args, stream, lane_name


def _order(pid: Any) -> Tuple[int, Any]:
    """Sort key for pids that may mix ints (devices) and strings."""
    return (0, pid) if isinstance(pid, int) else (1, str(pid))


class _Rendered:
    """The annotated ``traceEvents`` and whether any event matched an annotated node."""

    def __init__(self) -> None:
        self.events: List[Dict[str, Any]] = []
        self.annotated = False


def _render(trace: KinetoTrace, layout: Optional[LaneLayout]) -> _Rendered:
    placements = layout.placements if layout else {}
    graph_lanes = layout.graph_lanes if layout else "none"
    # torch 2.15 does nothing per event without annotations (an empty mapping reads as None)
    annotate = any(p.annotation for p in placements.values())
    out = _Rendered()
    # Lanes as torch 2.15 sees them: every (pid, tid) with an event is a real one and keeps its name.
    seen = {(e.pid, e.tid) for e in trace.events if e.ph != "M" or e.name == "thread_name"}
    moved_flows: Dict[Tuple[Any, Any, int, Any], Any] = {}
    # placed GPU event index -> (tid, args); flows and lane names follow from it
    placed: Dict[int, Tuple[Any, Dict[str, Any]]] = {}
    reassigned: Dict[Tuple[Any, Any], Tuple[int, Optional[str]]] = {}
    work_lanes = set()
    for e in trace.events:
        p = placements.get(e.index)
        if p is None:
            if e.ph == "X" and e.category in _WORK_CATEGORIES:
                work_lanes.add((e.pid, e.tid))
            continue
        args = dict(e.args)
        for k, v in p.args.items():  # ours: graph ids where Kineto has none; replay, join
            if k in ("graph id", "graph node id") and k not in args:
                args[k] = v
        tid = e.tid
        if p.annotation is not None or args.get("graph node id"):
            ann_args, stream, lane_name = torch_annotation_args(p.annotation) if p.annotation else ({}, None, None)
            out.annotated = out.annotated or bool(p.annotation)
            args.update(ann_args)
            if graph_lanes == "all":
                tid = stream if stream is not None else p.lane
            if tid != e.tid:
                prev = reassigned.get((e.pid, tid))
                if lane_name is None and prev is not None:
                    lane_name = prev[1]
                reassigned[(e.pid, tid)] = (e.ts_ns, lane_name)
                if "stream" in args:
                    args["stream"] = tid
                else:
                    args = {**args, "stream": tid}
                args["original_stream"] = e.tid
                if e.ts_ns is not None:
                    moved_flows[(e.pid, e.tid, e.ts_ns, e.correlation)] = tid
            elif stream is not None:
                args["annotated_stream"] = stream
        for k in OUR_ARGS:
            if k in p.args:
                args[k] = p.args[k]
        placed[e.index] = (tid, args)
        if e.category in _WORK_CATEGORIES:
            work_lanes.add((e.pid, tid))

    held_back: List[Dict[str, Any]] = []
    last_activity = -1  # position in out.events of the profile's last activity (an int pid, not metadata)
    for e in trace.events:
        hit = placed.get(e.index)
        if hit is not None:
            out.events.append(_event_dict(e, tid=hit[0], args=hit[1]))
            last_activity = len(out.events)
            continue
        if e.ph == "f" and moved_flows and e.ts_ns is not None:
            lane = moved_flows.get((e.pid, e.tid, e.ts_ns, e.id))
            if lane is not None:
                out.events.append(_event_dict(e, tid=lane))
                last_activity = len(out.events)
                continue
        if annotate and e.category == "gpu_user_annotation":
            # torch 2.15 holds these back (deferred_annotations) and writes them after every
            # other activity, only where their lane still has work after the moves: on a lane
            # whose kernels all moved away it is noise CUPTI replicated there
            if (e.pid, e.tid) in work_lanes:
                held_back.append(_event_dict(e))
            continue
        out.events.append(_event_dict(e))
        if e.ph != "M" and type(e.pid) is int:
            last_activity = len(out.events)
    if held_back:
        at = last_activity if last_activity >= 0 else len(out.events)
        out.events[at:at] = held_back

    for (pid, tid), (ts, name) in sorted(reassigned.items(), key=lambda kv: (_order(kv[0][0]), kv[0][1])):
        if (pid, tid) in seen:
            continue
        for meta, value in (("thread_name", {"name": name or f"stream {tid} "}), ("thread_sort_index", {"sort_index": tid})):
            m: Dict[str, Any] = {"ph": "M", "name": meta}
            if ts is not None:
                m["ts"] = _us(ts)
            m.update({"pid": pid, "tid": tid, "args": value})
            out.events.append(m)
    return out


def annotated_events(trace: KinetoTrace, layout: Optional[LaneLayout]) -> List[Dict[str, Any]]:
    """``traceEvents`` of the annotated trace: file order, then the new lanes' metadata."""
    return _render(trace, layout).events


def write_chrome_json(trace: KinetoTrace, out: PathLike, layout: Optional[LaneLayout] = None) -> None:
    """Write ``trace`` with ``layout``'s lanes and args as Chrome JSON (``.json`` or ``.json.gz``).

    Every top-level key of the source is kept. Written atomically: on any error the
    previous file (if any) is untouched.
    """
    rendered = _render(trace, layout)
    doc: Dict[str, Any] = {k: v for k, v in trace.metadata.items() if k != INLINE_ANNOTATED_KEY}
    if rendered.annotated:  # before traceEvents, so a header-only read finds it (as torch writes it)
        doc[INLINE_ANNOTATED_KEY] = True
    doc["traceEvents"] = rendered.events
    if "traceName" in doc:  # Kineto and torch write it last
        doc["traceName"] = doc.pop("traceName")
    atomic_write_bytes(out, _encoder.encode(doc))
