"""A synthetic decoder trace with nested scopes, for the GPU projection tests (not a test module).

Two graphs of the same decoder (``decode bs=1`` and ``decode bs=4``, grids differ by batch
size) with ``layer i`` ⊃ ``attn`` (two kernels on two streams that overlap) and ``mlp``
(two kernels), replayed interleaved. The generator returns, besides the Kineto JSON and
the annotation set, the ground truth per kernel (graph, replay, layer, part, ts, end), so
tests compute every expected range from it, not from the code under test.

``strategy`` picks what the join can use: ``exact`` (``graph node id`` args in the
trace), ``calibrated`` (stream + ordinal on the nodes) or ``structural`` (neither; kernel
names are unique per layer so the match is unambiguous).

:func:`write_schedule` writes replays at given GPU times instead (so they may overlap on one
GPU), with eager kernels between them and a profiling window that may cut replays.
"""
from __future__ import annotations

import dataclasses
import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from perfetto_graph_ann.annotations.model import AnnotationSet, GraphRecord, NodeRecord, ScopeInstance

CPU_PID = CPU_TID = 4242
#: (part, kernel role, stream): the nodes of one layer in capture order
LAYER_NODES = (("attn", "qk", 7), ("attn", "av", 8), ("mlp", "up", 7), ("mlp", "down", 7))
GRAPHS = ((11, "decode bs=1", 1), (12, "decode bs=4", 4))  # exec id, name, batch size


@dataclasses.dataclass
class Kernel:
    index: int  #: position in traceEvents
    graph: int
    replay: int
    layer: int
    part: str
    ts: int
    end: int
    visible: bool = True  #: in the written trace (False: outside the profiling window)
    launched: bool = True  #: its replay's cudaGraphLaunch is in the written trace


def _us(ns: int) -> str:
    return format((Decimal(ns) / 1000).quantize(Decimal("0.001")), "f")


def annotations(layers: int, strategy: str, recorded: bool = True,
                streams: Optional[Dict[int, Tuple[int, int]]] = None) -> AnnotationSet:
    """The two graphs' records; ``recorded=False`` leaves out the scope table (derived mode).
    ``streams``: graph index -> the two streams its calibration saw (default 7 and 8)."""
    graphs = []
    for g, (exec_id, name, bs) in enumerate(GRAPHS):
        nodes, scopes = [], []
        ordinal = {7: 0, 8: 0}
        on = dict(zip((7, 8), (streams or {}).get(g, (7, 8))))
        local = 0
        for layer in range(layers):
            lid = len(scopes)
            scopes.append(ScopeInstance(lid, {"name": "layer", "layer": layer}))
            part_ids = {}
            for part in ("attn", "mlp"):
                part_ids[part] = len(scopes)
                scopes.append(ScopeInstance(len(scopes), {"name": part}, lid))
            for part, role, stream in LAYER_NODES:
                cal = strategy == "calibrated"
                nodes.append(NodeRecord(
                    key=(exec_id << 32) | local, kernel=f"k_{role}_{layer}", grid=(bs * 8, 1, 1), block=(128, 1, 1),
                    annotation={"name": part, "layer": layer}, stream=on[stream] if cal else None,
                    ordinal=ordinal[stream] if cal else None,
                    scopes=(lid, part_ids[part]) if recorded else ()))
                ordinal[stream] += 1
                local += 1
        graphs.append(GraphRecord(exec_id, tuple(nodes), name=name, scopes=tuple(scopes) if recorded else None))
    return AnnotationSet(graphs=tuple(graphs))


def write_trace(path: Path, layers: int = 3, order: Tuple[int, ...] = (0, 1, 0, 1, 0), strategy: str = "exact",
                seed: int = 21, gap: Tuple[int, int] = (20_000, 60_000)) -> List[Kernel]:
    """Write the Kineto JSON; returns the ground truth of every kernel.

    ``gap``: range of ns from a replay's last GPU end to the next replay's start; negative
    values make consecutive replays overlap on the GPU (concurrent replays)."""
    rng = random.Random(seed)
    events: List[Dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": CPU_PID, "tid": 0, "args": {"name": "python3"}},
        {"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "python3"}},
        {"name": "process_labels", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
    ]
    truth: List[Kernel] = []
    t = 1_000_000_000
    t0 = t - 100_000
    replays = {0: 0, 1: 0}
    corr = 500
    for g in order:
        exec_id, _name, bs = GRAPHS[g]
        corr += 3
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": CPU_PID, "tid": CPU_TID,
                       "ts": _us(t - rng.randint(5_000, 30_000)), "dur": _us(rng.randint(2_000, 4_000)),
                       "args": {"correlation": corr}})
        local = 0
        cur = t + rng.randint(0, 500)
        for layer in range(layers):
            # attn: qk on stream 7 and av on stream 8, overlapping; then mlp up, down on stream 7
            qk_ts, qk_d = cur, rng.randint(3_000, 9_000) * bs
            av_ts, av_d = cur + rng.randint(1, 2_000), rng.randint(3_000, 9_000) * bs
            up_ts = max(qk_ts + qk_d, av_ts + av_d) + rng.randint(0, 800)
            up_d = rng.randint(4_000, 12_000) * bs
            down_ts, down_d = up_ts + up_d + rng.randint(0, 300), rng.randint(2_000, 5_000)
            for (part, role, stream), (ts, d) in zip(LAYER_NODES, ((qk_ts, qk_d), (av_ts, av_d), (up_ts, up_d),
                                                                   (down_ts, down_d))):
                args: Dict[str, Any] = {"queued": 0, "device": 0, "context": 1, "stream": stream, "correlation": corr,
                                        "grid": [bs * 8, 1, 1], "block": [128, 1, 1]}
                if strategy == "exact":
                    args["graph id"] = exec_id
                    args["graph node id"] = (exec_id << 32) | local
                events.append({"ph": "X", "cat": "kernel", "name": f"k_{role}_{layer}", "pid": 0, "tid": stream,
                               "ts": _us(ts), "dur": _us(d), "args": args})
                truth.append(Kernel(len(events) - 1, exec_id, replays[g], layer, part, ts, ts + d))
                local += 1
            cur = down_ts + down_d + rng.randint(0, 1_000)
        replays[g] += 1
        t = cur + rng.randint(*gap)
    events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                   "tid": "PyTorch Profiler", "ts": _us(t0), "dur": _us(t - t0), "args": {"Op count": 0}})
    events.append({"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0,
                   "ts": _us(t0 + 10), "dur": _us(50)})
    events.append({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": _us(t + 1500)})
    _write_trace(path, events)
    return truth


@dataclasses.dataclass(frozen=True)
class Launch:
    """One replay of :func:`write_schedule`: which graph, when its GPU work starts (ns), and
    the two streams its kernels run on (``attn``'s second kernel on the second)."""

    graph: int  #: index in GRAPHS
    start: int
    streams: Tuple[int, int] = (7, 8)


#: Eager kernels of :func:`write_schedule`: same names as graph kernels, on a stream of their own
EAGER_STREAM = 20


def _layer_times(rng: random.Random, cur: int, bs: int) -> List[Tuple[int, int]]:
    """(ts, dur) of one layer's qk, av, up, down: attn's two kernels overlap, mlp's are serial."""
    qk = (cur, rng.randint(3_000, 9_000) * bs)
    av = (cur + rng.randint(1, 2_000), rng.randint(3_000, 9_000) * bs)
    up_ts = max(qk[0] + qk[1], av[0] + av[1]) + rng.randint(0, 800)
    up = (up_ts, rng.randint(4_000, 12_000) * bs)
    down = (up_ts + up[1] + rng.randint(0, 300), rng.randint(2_000, 5_000))
    return [qk, av, up, down]


def write_schedule(path: Path, launches: Sequence[Launch], layers: int = 2, strategy: str = "exact",
                   eager: int = 0, window: Optional[Tuple[int, int]] = None, seed: int = 7) -> List[Kernel]:
    """Write a Kineto JSON with the replays of ``launches`` (in launch order) and return the
    ground truth of every graph kernel, written or not.

    Each replay's ``cudaGraphLaunch`` is on the CPU 40-60 us before its GPU start, so launch
    order is ``launches`` order when starts are at least 20 us apart. ``eager`` kernels
    (each with a ``cudaLaunchKernel`` of its own correlation, named like graph kernels) are
    spread over the whole schedule on :data:`EAGER_STREAM`. ``window`` (lo, hi), relative to
    the schedule's origin: events starting before ``lo`` or ending after ``hi`` are not
    written (a profiling window that cuts replays). ``Kernel.replay`` is the replay's index
    among the graph's launches in ``launches``; ``Kernel.ts`` / ``end`` are trace times (ns).
    """
    rng = random.Random(seed)
    base = 1_000_000_000
    events: List[Dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": CPU_PID, "tid": 0, "args": {"name": "python3"}},
        {"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "python3"}},
        {"name": "process_labels", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
    ]
    lo, hi = window if window is not None else (-(1 << 60), 1 << 60)

    def inside(ts: int, end: int) -> bool:
        return lo <= ts and end <= hi

    truth: List[Kernel] = []
    counts = {g: 0 for g in range(len(GRAPHS))}
    corr = 900
    last_end = 0
    for launch in launches:
        exec_id, _name, bs = GRAPHS[launch.graph]
        corr += 1
        cpu_ts = launch.start - rng.randint(40_000, 60_000)
        launched = inside(cpu_ts, cpu_ts + 3_000)
        if launched:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": CPU_PID,
                           "tid": CPU_TID, "ts": _us(base + cpu_ts), "dur": _us(3_000),
                           "args": {"correlation": corr}})
        cur = launch.start
        local = 0
        for layer in range(layers):
            times = _layer_times(rng, cur, bs)
            for (part, role, which), (ts, d) in zip(LAYER_NODES, times):
                stream = launch.streams[0] if which == 7 else launch.streams[1]
                visible = inside(ts, ts + d)
                index = -1
                if visible:
                    args: Dict[str, Any] = {"queued": 0, "device": 0, "context": 1, "stream": stream,
                                            "correlation": corr, "grid": [bs * 8, 1, 1], "block": [128, 1, 1]}
                    if strategy == "exact":
                        args["graph id"] = exec_id
                        args["graph node id"] = (exec_id << 32) | local
                    events.append({"ph": "X", "cat": "kernel", "name": f"k_{role}_{layer}", "pid": 0,
                                   "tid": stream, "ts": _us(base + ts), "dur": _us(d), "args": args})
                    index = len(events) - 1
                truth.append(Kernel(index, exec_id, counts[launch.graph], layer, part, base + ts, base + ts + d,
                                    visible, launched))
                local += 1
                last_end = max(last_end, ts + d)
            cur = times[3][0] + times[3][1] + rng.randint(0, 1_000)
        counts[launch.graph] += 1
    first = min(x.start for x in launches)
    for k in range(eager):
        corr += 1
        ts = first + (last_end - first) * k // max(eager, 1)
        d = rng.randint(1_000, 6_000)
        if not inside(ts - 20_000, ts + d):
            continue
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": CPU_PID,
                       "tid": CPU_TID, "ts": _us(base + ts - 20_000), "dur": _us(2_000),
                       "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": f"k_qk_{k % layers}", "pid": 0, "tid": EAGER_STREAM,
                       "ts": _us(base + ts), "dur": _us(d),
                       "args": {"queued": 0, "device": 0, "context": 1, "stream": EAGER_STREAM,
                                "correlation": corr, "grid": [8, 1, 1], "block": [128, 1, 1]}})
    t0 = max(lo, first - 100_000)
    t1 = min(hi, last_end + 10_000)
    events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                   "tid": "PyTorch Profiler", "ts": _us(base + t0), "dur": _us(t1 - t0), "args": {"Op count": 0}})
    _write_trace(path, events)
    return truth


def _write_trace(path, events) -> None:
    """Write ``events`` as a Kineto trace on the synthetic GPU, times as JSON numbers with
    Kineto's 3 decimals (the generators keep them as ``_us`` strings)."""
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}],
           "baseTimeNanoseconds": 1700000000000000000, "traceEvents": events}
    text = json.dumps(doc)
    for e in events:
        for k in ("ts", "dur"):
            if isinstance(e.get(k), str):
                text = text.replace(f'"{k}": "{e[k]}"', f'"{k}": {e[k]}', 1)
    path.write_text(text)
