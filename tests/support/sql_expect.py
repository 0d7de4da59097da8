"""Independent expectations for the graph_ann SQL tables (not a test module).

Everything here is computed in plain Python straight from a trace's JSON (numbers parsed
as Decimal, times in ns as the JSON importer computes them) plus, for joined traces, the
join's LaneLayout (which lane each event goes to, which args it gains). It never calls
the SQL, the metrics wrappers or the converter, and uses different algorithms from the
SQL (sweeps over sorted intervals instead of window functions, direct interval
intersection instead of inclusion-exclusion).
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import re
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
GRAPH_LAUNCHES = {"cudaGraphLaunch", "cuGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch_ptsz"}
#: Bytes per element for the dtype names torch's eager traces write.
ELEMENT_SIZE = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Char": 1, "Byte": 1,
                "Bool": 1, "Short": 2, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "ComplexFloat": 8}

Interval = Tuple[int, int]  # (start, end)


def ns(x: Any) -> int:
    """Kineto microseconds -> integer ns, exactly as the JSON importer (round half even)."""
    return int((Decimal(str(x)) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


def load_events(path: Path) -> List[Dict[str, Any]]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.loads(f.read(), parse_float=Decimal)["traceEvents"]


@dataclasses.dataclass
class Work:
    index: int
    ts: int
    dur: int
    name: str
    kind: str
    device: int
    lane: int
    lane_name: str
    stream: int
    correlation: Optional[int]
    args: Dict[str, Any]

    @property
    def end(self) -> int:
        return self.ts + self.dur


@dataclasses.dataclass
class Launch:
    index: int
    name: str
    ts: int
    dur: int


def works(events: Sequence[Dict[str, Any]], layout=None) -> List[Work]:
    """GPU work with its lane (the layout's placement, else its stream) and merged args."""
    out = []
    for i, e in enumerate(events):
        if e.get("ph") != "X" or e.get("cat") not in GPU_CATS:
            continue
        args = dict(e.get("args") or {})
        stream = args["stream"]
        lane = stream
        place = layout.placements.get(i) if layout is not None else None
        if place is not None:
            lane = place.lane
            args.update(place.args)
        device = args["device"]
        names = layout.lane_names if layout is not None else {}
        out.append(Work(i, ns(e["ts"]), ns(e["dur"]), e["name"], GPU_CATS[e["cat"]], device, lane,
                        names.get((device, lane), f"stream {lane}"), stream, args.get("correlation"), args))
    return out


def launches(events: Sequence[Dict[str, Any]]) -> Dict[int, Launch]:
    """CPU runtime / driver calls by correlation id (the first one of each id)."""
    out: Dict[int, Launch] = {}
    for i, e in enumerate(events):
        if e.get("ph") == "X" and e.get("cat") in LAUNCH_CATS:
            c = (e.get("args") or {}).get("correlation")
            if isinstance(c, int) and c not in out:
                out[c] = Launch(i, e["name"], ns(e["ts"]), ns(e["dur"]))
    return out


def profiled_span(events: Sequence[Dict[str, Any]]) -> Tuple[int, int]:
    """First start / last end over complete and instant events (the trace's slices)."""
    starts, ends = [], []
    for e in events:
        if e.get("ph") == "X":
            starts.append(ns(e["ts"]))
            ends.append(ns(e["ts"]) + ns(e["dur"]))
        elif e.get("ph") == "i":
            starts.append(ns(e["ts"]))
            ends.append(ns(e["ts"]))
    return min(starts), max(ends)


# ---- interval arithmetic (sweeps) --------------------------------------------------------------
def merge(intervals: Iterable[Interval]) -> List[Interval]:
    """Disjoint sorted intervals covering the same time (touching ones merged)."""
    out: List[List[int]] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(intervals: Iterable[Interval]) -> int:
    return sum(e - s for s, e in merge(intervals))


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> int:
    """Length of the intersection of two unions of intervals (two-pointer walk)."""
    a, b = merge(a), merge(b)
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def nearest_rank(values: Sequence[int], p: int) -> int:
    """p-th percentile, nearest-rank: the value at 1-based rank ceil(p * n / 100)."""
    v = sorted(values)
    rank = -(-p * len(v) // 100)
    return v[rank - 1]


# ---- tables -------------------------------------------------------------------------------------
def replay_of(w: Work, launch_by_corr: Dict[int, Launch]) -> Optional[Launch]:
    la = launch_by_corr.get(w.correlation)
    return la if la is not None and la.name in GRAPH_LAUNCHES else None


def lane_table(events, layout=None) -> Dict[Tuple[int, int], Dict[str, Any]]:
    ws = works(events, layout)
    lc = launches(events)
    span0, span1 = profiled_span(events)
    graphed = defaultdict(list)
    for w in ws:
        if replay_of(w, lc):
            graphed[w.device].append(w)
    replay_span = {d: (min(w.ts for w in g), max(w.end for w in g)) for d, g in graphed.items()}
    by_lane = defaultdict(list)
    for w in ws:
        by_lane[(w.device, w.lane)].append(w)
    out = {}
    for key, lw in by_lane.items():
        durs = [w.dur for w in lw]
        busy = length((w.ts, w.end) for w in lw)
        row = dict(
            lane_name=lw[0].lane_name, work_count=len(lw), kernel_count=sum(w.kind == "kernel" for w in lw),
            total_dur=sum(durs), busy_dur=busy, utilization=busy / (span1 - span0),
            mean_dur=sum(durs) / len(durs), p50_dur=nearest_rank(durs, 50), p90_dur=nearest_rank(durs, 90),
            p99_dur=nearest_rank(durs, 99), min_dur=min(durs), max_dur=max(durs),
            first_ts=min(w.ts for w in lw), last_ts=max(w.ts for w in lw), end_ts=max(w.end for w in lw),
            replay_utilization=None,
        )
        rs = replay_span.get(key[0])
        if rs:
            clipped = [(max(w.ts, rs[0]), min(w.end, rs[1])) for w in lw]
            row["replay_utilization"] = length(clipped) / (rs[1] - rs[0])
        out[key] = row
    return out


def top_kernels(events, layout=None) -> Dict[Tuple[int, int, str], Dict[str, Any]]:
    by_lane = defaultdict(lambda: defaultdict(list))
    for w in works(events, layout):
        if w.kind == "kernel":
            by_lane[(w.device, w.lane)][w.name].append(w.dur)
    out = {}
    for (device, lane), kernels in by_lane.items():
        lane_total = sum(sum(d) for d in kernels.values())
        order = sorted(kernels, key=lambda n: (-sum(kernels[n]), n))
        for rank, name in enumerate(order, 1):
            d = kernels[name]
            out[(device, lane, name)] = dict(rank=rank, count=len(d), total_dur=sum(d), mean_dur=sum(d) / len(d),
                                             max_dur=max(d), share=sum(d) / lane_total)
    return out


def replay_table(events, layout=None) -> Dict[int, Dict[str, Any]]:
    """Keyed by the launch correlation."""
    lc = launches(events)
    groups = defaultdict(list)
    for w in works(events, layout):
        if replay_of(w, lc):
            groups[w.correlation].append(w)
    out = {}
    for corr, g in groups.items():
        la = lc[corr]
        ts, end = min(w.ts for w in g), max(w.end for w in g)
        busy = length((w.ts, w.end) for w in g)
        gids = [w.args["graph id"] for w in g if "graph id" in w.args]
        reps = [w.args["replay"] for w in g if "replay" in w.args]
        lanes = defaultdict(list)
        for w in g:
            lanes[w.lane].append(w)
        out[corr] = dict(
            device=g[0].device, launch_name=la.name, launch_ts=la.ts, launch_dur=la.dur, ts=ts, end_ts=end,
            wall_dur=end - ts, work_count=len(g), lane_count=len(lanes), busy_dur=busy,
            busy_fraction=busy / (end - ts) if end > ts else None, launch_to_gpu_dur=ts - la.ts,
            graph_id=min(gids) if gids else None, replay=min(reps) if reps else None,
            lanes={lane: dict(work_count=len(lw), busy_dur=length((w.ts, w.end) for w in lw),
                              ts=min(w.ts for w in lw), end_ts=max(w.end for w in lw), lane_name=lw[0].lane_name)
                   for lane, lw in lanes.items()},
        )
    # Queueing behind earlier work on the device: earlier replays (whole) and work outside replays.
    loose = [w for w in works(events, layout) if not replay_of(w, lc)]
    for corr, r in out.items():
        ends = [o["end_ts"] for o in out.values() if o["device"] == r["device"] and o["ts"] < r["ts"]]
        ends += [w.end for w in loose if w.device == r["device"] and w.ts < r["ts"]]
        queued = max(0, min(max(ends), r["ts"]) - r["launch_ts"]) if ends else 0
        r["queued_dur"] = queued
        r["launch_overhead_dur"] = r["launch_to_gpu_dur"] - queued
    by_device = defaultdict(list)
    for corr, r in out.items():
        by_device[r["device"]].append((r["ts"], corr))
    for items in by_device.values():
        for idx, (_, corr) in enumerate(sorted(items)):
            out[corr]["replay_index"] = idx
    return out


_TYPES = [("allreduce", r"allreduce"), ("allgather", r"allgather"), ("reducescatter", r"reducescatter"),
          ("alltoall", r"alltoall"), ("broadcast", r"broadcast"), ("reduce", r"reduce"),
          ("sendrecv", r"send|recv")]


def collective_type(name: str) -> str:
    flat = name.lower().replace("_", "")
    for t, pat in _TYPES:
        if re.search(pat, flat):
            return t
    return "other"


def busbw_factor(ctype: str, n: Optional[int]) -> Optional[float]:
    if not n:
        return None
    return {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n, "reducescatter": (n - 1) / n,
            "alltoall": (n - 1) / n, "broadcast": 1.0, "reduce": 1.0, "sendrecv": 1.0}.get(ctype)


def is_collective(w: Work) -> bool:
    return w.kind == "kernel" and ("Collective name" in w.args or w.name.startswith("nccl"))


def collective_table(events, layout=None) -> Dict[int, Dict[str, Any]]:
    """Keyed by the event's index in the JSON (its ts is unique enough to join on too)."""
    lc = launches(events)
    out = {}
    for w in works(events, layout):
        if not is_collective(w):
            continue
        a = w.args
        cname = a.get("Collective name")
        ctype = collective_type(cname if cname is not None else w.name)
        size = ELEMENT_SIZE.get(a.get("dtype"))
        i_n, o_n = a.get("In msg nelems"), a.get("Out msg nelems")
        msg = max(i_n, o_n) * size if size is not None and i_n is not None and o_n is not None else None
        n = a.get("Group size")
        algbw = msg / w.dur if msg is not None and w.dur else None
        f = busbw_factor(ctype, n)
        out[w.index] = dict(
            ts=w.ts, dur=w.dur, device=w.device, lane_id=w.lane, lane_name=w.lane_name, name=w.name,
            is_graphed=replay_of(w, lc) is not None, has_metadata=cname is not None, collective=cname,
            collective_type=ctype, dtype=a.get("dtype"), element_size=size, in_nelems=i_n, out_nelems=o_n,
            in_bytes=i_n * size if size and i_n is not None else None,
            out_bytes=o_n * size if size and o_n is not None else None, msg_bytes=msg, group_size=n,
            pg_name=a.get("Process Group Name"), pg_desc=a.get("Process Group Description"),
            pg_ranks=a.get("Process Group Ranks"), algbw_gbps=algbw, busbw_factor=f,
            busbw_gbps=algbw * f if algbw is not None and f is not None else None,
        )
    return out


def overlap_table(events, layout=None) -> Dict[int, Dict[str, Any]]:
    by_dev = defaultdict(lambda: defaultdict(list))
    for w in works(events, layout):
        cls = "comm" if is_collective(w) else ("compute" if w.kind == "kernel" else "memory")
        by_dev[w.device][cls].append((w.ts, w.end))
        by_dev[w.device]["all"].append((w.ts, w.end))
    out = {}
    for d, c in by_dev.items():
        start, end = min(s for s, _ in c["all"]), max(e for _, e in c["all"])
        comm, compute = length(c["comm"]), length(c["compute"])
        ov = intersect(c["comm"], c["compute"])
        busy = length(c["all"])
        out[d] = dict(ts=start, dur=end - start, busy_dur=busy, compute_dur=compute, comm_dur=comm,
                      memory_dur=length(c["memory"]), overlapped_comm_dur=ov, exposed_comm_dur=comm - ov,
                      comm_overlap_fraction=ov / comm if comm else None, idle_dur=end - start - busy)
    return out


def lane_gaps(events, layout=None) -> Dict[Tuple[int, int], List[Interval]]:
    """Per lane, the gaps between its merged busy intervals as (start, end)."""
    by_lane = defaultdict(list)
    for w in works(events, layout):
        by_lane[(w.device, w.lane)].append((w.ts, w.end))
    out = {}
    for key, iv in by_lane.items():
        m = merge(iv)
        out[key] = [(a[1], b[0]) for a, b in zip(m, m[1:])]
    return out


# ---- comparing SQL rows with these expectations ----------------------------------------------

#: Relative tolerance of a float column (exact ints and strings are compared exactly).
REL = 1e-9


def isnull(v) -> bool:
    """SQL NULL as pandas gives it back (None, NaN, pd.NA)."""
    try:
        return v is None or bool(v != v) or str(v) == "<NA>"
    except (TypeError, ValueError):
        return False


def check_row(actual, expected, where: str) -> None:
    """Every expected column of one row: NULL, bool, exact int, float within :data:`REL`, or equal."""
    import math

    for k, want in expected.items():
        got = actual[k]
        if want is None:
            assert isnull(got), f"{where}: {k} = {got!r}, expected NULL"
        elif isinstance(want, bool):
            assert int(got) == int(want), f"{where}: {k} = {got!r}, expected {want!r}"
        elif isinstance(want, int):
            assert not isnull(got) and int(got) == want and float(got) == want, f"{where}: {k} = {got!r}, expected {want!r}"
        elif isinstance(want, float):
            assert not isnull(got) and math.isclose(float(got), want, rel_tol=REL, abs_tol=0.0), \
                f"{where}: {k} = {got!r}, expected {want!r}"
        else:
            assert got == want, f"{where}: {k} = {got!r}, expected {want!r}"
