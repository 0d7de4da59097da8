"""Synthetic large torch.profiler traces built from the bundled H200 recordings' patterns.

``make_trace(n_events)`` repeats the events of real fixtures (eager CPU ops, runtime
launches, kernels, graph replays with their ``ac2g`` flows) with shifted timestamps and
fresh correlation ids until ``n_events`` events are reached, keeping Kineto's number format
(microseconds with 3 decimals). ``overlap_ns`` > 0 makes consecutive kernels of one stream
overlap (like lanes that gather several streams, or replay timestamp jitter). Used by
``benchmarks/convert.py`` and by tests that need large or overlapping inputs.
"""
from __future__ import annotations

import copy
import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from perfetto_graph_ann._resources import demo_data_dir

#: Fixtures whose patterns are repeated (eager CPU + GPU, graph replays, NCCL).
PATTERN_FIXTURES = ("seed_block_eager", "seed_block_graph", "allreduce_eager_rank0")


def _load(name: str) -> Dict[str, Any]:
    with gzip.open(demo_data_dir() / f"{name}.trace.json.gz", "rb") as f:
        return json.loads(f.read(), parse_float=Decimal)


def _us(ns: int) -> Decimal:
    return (Decimal(ns) / 1000).quantize(Decimal("0.001"))


def make_trace(n_events: int, fixtures: Sequence[str] = PATTERN_FIXTURES, overlap_ns: int = 0) -> Dict[str, Any]:
    """A Kineto-shaped trace dict (numbers as Decimal) with at least ``n_events`` events."""
    sources = [_load(n) for n in fixtures]
    head = {k: v for k, v in sources[0].items() if k != "traceEvents"}
    meta: List[Dict[str, Any]] = []
    seen_meta = set()
    bodies = []
    for src in sources:
        body = []
        for e in src["traceEvents"]:
            if e.get("ph") == "M":
                key = (e.get("name"), str(e.get("pid")), str(e.get("tid")))
                if key not in seen_meta:
                    seen_meta.add(key)
                    meta.append(e)
            elif e.get("ph") == "i":
                continue
            else:
                body.append(e)
        t0 = min(Decimal(e["ts"]) for e in body if "ts" in e)
        t1 = max(Decimal(e["ts"]) + Decimal(e.get("dur", 0)) for e in body if "ts" in e)
        bodies.append((body, t0, t1))
    events: List[Dict[str, Any]] = list(meta)
    base_ts = bodies[0][1]
    cursor = base_ts
    rep = 0
    while len(events) < n_events:
        body, t0, t1 = bodies[rep % len(bodies)]
        shift = cursor - t0
        corr_shift = rep * 1_000_000
        for e in body:
            e = copy.deepcopy(e)
            if "ts" in e:
                e["ts"] = Decimal(e["ts"]) + shift
            args = e.get("args")
            if isinstance(args, dict):
                if isinstance(args.get("correlation"), int):
                    args["correlation"] += corr_shift
                if isinstance(args.get("External id"), int):
                    args["External id"] += corr_shift
            if e.get("cat") == "ac2g" and isinstance(e.get("id"), int):
                e["id"] += corr_shift
            events.append(e)
        cursor += (t1 - t0) + Decimal(10)
        rep += 1
    if overlap_ns:
        _make_overlap(events, overlap_ns)
    head["traceEvents"] = events
    return head


def _make_overlap(events: List[Dict[str, Any]], overlap_ns: int) -> None:
    """Stretch each kernel so it overlaps the next one on its stream by ``overlap_ns``."""
    by_stream: Dict[Any, List[Dict[str, Any]]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            by_stream.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for kernels in by_stream.values():
        kernels.sort(key=lambda e: e["ts"])
        for a, b in zip(kernels, kernels[1:]):
            gap_end = Decimal(b["ts"]) - Decimal(a["ts"]) + _us(overlap_ns)
            if gap_end > Decimal(a["dur"]):
                a["dur"] = gap_end


def dumps(trace: Dict[str, Any]) -> bytes:
    """JSON text as Kineto writes it (Decimals printed without float rounding)."""

    def default(o: Any) -> Any:
        if isinstance(o, Decimal):
            return _RawNumber(o)
        raise TypeError(type(o))

    return _encode(trace).encode()


class _RawNumber(float):
    pass


def _encode(o: Any) -> str:
    if isinstance(o, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_encode(v)}" for k, v in o.items()) + "}"
    if isinstance(o, list):
        return "[" + ", ".join(_encode(v) for v in o) + "]"
    if isinstance(o, Decimal):
        s = format(o, "f")
        return s
    return json.dumps(o)


def write_trace(path: Path, n_events: int, overlap_ns: int = 0, gz: Optional[bool] = None) -> Path:
    """Write a synthetic trace to ``path`` (gzip if the name ends in .gz)."""
    data = dumps(make_trace(n_events, overlap_ns=overlap_ns))
    path = Path(path)
    if gz is None:
        gz = path.name.endswith(".gz")
    if gz:
        with gzip.open(path, "wb", compresslevel=6) as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def write_large(path: Path, target_bytes: int, block_events: int = 60_000) -> int:
    """Stream a synthetic trace of at least ``target_bytes`` to ``path`` (plain JSON) without
    holding it: one block of :func:`make_trace` is encoded once as a template, then repeated with
    its times shifted past the previous block and its correlation / flow ids shifted to stay
    unique, until the size is reached. Returns the number of events written."""
    base = make_trace(block_events)
    events = base.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    body = [copy.deepcopy(e) for e in events if e.get("ph") != "M"]
    ns = [int(Decimal(e["ts"]) * 1000) for e in body if "ts" in e]
    ends = [int((Decimal(e["ts"]) + Decimal(e.get("dur", 0))) * 1000) for e in body if "ts" in e]
    period = max(ends) - min(ns) + 10_000
    ids = [0]
    templates = []  # per event: [text, (kind, base value), text, ...]
    for e in body:
        slots = []
        if "ts" in e:
            slots.append(("ts", int(Decimal(e["ts"]) * 1000)))
            e["ts"] = f"@@{len(slots) - 1}@@"
        args = e.get("args")
        for key in ("correlation", "External id"):
            if isinstance(args, dict) and isinstance(args.get(key), int):
                ids.append(args[key])
                slots.append(("id", args[key]))
                args[key] = f"@@{len(slots) - 1}@@"
        if e.get("cat") == "ac2g" and isinstance(e.get("id"), int):
            ids.append(e["id"])
            slots.append(("id", e["id"]))
            e["id"] = f"@@{len(slots) - 1}@@"
        text = _encode(e)
        parts: List[Any] = []
        for k in sorted(range(len(slots)), key=lambda k: text.index(f'"@@{k}@@"')):
            before, text = text.split(f'"@@{k}@@"', 1)
            parts += [before, slots[k]]
        parts.append(text)
        templates.append(parts)
    id_period = max(ids) + 1
    head = _encode(base)[:-1]
    written = 0
    n = 0
    with open(path, "w") as f:
        f.write(head + (", " if base else "") + '"traceEvents": [')
        f.write(", ".join(_encode(e) for e in meta))
        n += len(meta)
        rep = 0
        while f.tell() < target_bytes:
            t_shift, id_shift = rep * period, rep * id_period
            out = []
            for parts in templates:
                s = []
                for p in parts:
                    if type(p) is str:
                        s.append(p)
                    elif p[0] == "ts":
                        v = p[1] + t_shift
                        s.append(f"{v // 1000}.{v % 1000:03d}")
                    else:
                        s.append(str(p[1] + id_shift))
                out.append("".join(s))
            f.write(", " + ", ".join(out))
            n += len(out)
            rep += 1
        f.write("]}")
        written = f.tell()
    return n if written else 0
