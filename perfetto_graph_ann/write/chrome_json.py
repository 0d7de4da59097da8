"""Annotated Chrome JSON: the join's lanes and args written back as a torch.profiler trace.

For HTA and TensorBoard users. Matches what torch 2.15's ``export_chrome_trace`` writes
with ``graph_lanes``: a placed GPU event gets ``tid`` = its lane, ``args.stream`` = the
lane and the join args (``original_stream`` or ``annotated_stream``, annotation fields,
``graph id``, ``graph node id``, ``replay``, ``join``); its incoming ``ac2g`` flow end moves
with it so the launch arrow still lands; each lane gets ``thread_name`` /
``thread_sort_index`` metadata naming it (``"62 attention"``). Times are written back
exactly (``ts_ns`` as a 3-decimal microsecond number, no float rounding).
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any, Dict, List, Optional, Tuple

import msgspec

from ..errors import PathLike
from ..join.model import LaneLayout
from ..read.model import KinetoTrace, TraceEvent
from ..util.atomic import atomic_write_bytes

__all__ = ["write_chrome_json", "annotated_events"]

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


def annotated_events(trace: KinetoTrace, layout: Optional[LaneLayout]) -> List[Dict[str, Any]]:
    """``traceEvents`` of the annotated trace, in file order plus the lane metadata."""
    placements = layout.placements if layout else {}
    # Flow ends ("f", bound to the enclosing slice) follow their GPU event to its lane.
    moved: Dict[Tuple[Any, Any, int, Any], Any] = {}
    by_index: Optional[Dict[int, TraceEvent]] = None  # only for traces whose index is not the position
    for idx, p in placements.items():
        e = trace.events[idx] if idx < len(trace.events) and trace.events[idx].index == idx else None
        if e is None:
            if by_index is None:
                by_index = {x.index: x for x in trace.events}
            e = by_index[idx]
        if e.tid != p.lane and e.ts_ns is not None:
            moved[(e.pid, e.tid, e.ts_ns, e.correlation)] = p.lane

    out: List[Dict[str, Any]] = []
    thread_names: Dict[Tuple[Any, Any], int] = {}
    for e in trace.events:
        p = placements.get(e.index)
        if p is not None:
            args = dict(e.args)
            args.update(p.args)
            args["stream"] = p.lane
            out.append(_event_dict(e, tid=p.lane, args=args))
            continue
        if e.ph == "f" and moved and e.ts_ns is not None:
            lane = moved.get((e.pid, e.tid, e.ts_ns, e.id))
            if lane is not None:
                out.append(_event_dict(e, tid=lane))
                continue
        if e.ph == "M" and e.name == "thread_name":
            thread_names[(e.pid, e.tid)] = len(out)
        out.append(_event_dict(e))

    if layout is not None:
        ts = next((e.ts_ns for e in trace.events if e.ph == "M" and e.ts_ns is not None), None)
        for (device, lane), name in sorted(layout.lane_names.items()):
            at = thread_names.get((device, lane))
            if at is not None:
                if not name.startswith("stream "):  # a logical lane's name wins over "stream N"
                    out[at]["args"] = {"name": name}
                continue
            for meta, value in (("thread_name", {"name": name}), ("thread_sort_index", {"sort_index": lane})):
                m: Dict[str, Any] = {"name": meta, "ph": "M"}
                if ts is not None:
                    m["ts"] = _us(ts)
                m.update({"pid": device, "tid": lane, "args": value})
                out.append(m)
    return out


def write_chrome_json(trace: KinetoTrace, out: PathLike, layout: Optional[LaneLayout] = None) -> None:
    """Write ``trace`` with ``layout``'s lanes and args as Chrome JSON (``.json`` or ``.json.gz``).

    Every top-level key of the source is kept. Written atomically: on any error the
    previous file (if any) is untouched.
    """
    doc: Dict[str, Any] = dict(trace.metadata)
    doc["traceEvents"] = annotated_events(trace, layout)
    atomic_write_bytes(out, _encoder.encode(doc))
