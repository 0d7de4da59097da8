"""Small synthetic Kineto-like traces for the graph_ann SQL tests (not a test module).

``overlap_trace``: CUDA graph replays whose kernels run on three hardware streams; a
hand-built LaneLayout gathers two of them into lane 61 (so kernels overlap on a lane,
some starting at the same ns) and moves the NCCL kernels to lane 60, where they overlap
compute; plus eager collectives of every type nccl-tests knows, with different dtypes and
group sizes.

``gaps_trace``: eager kernels on one stream with idle gaps, memcpy and memset on another,
a zero-duration kernel and an NCCL kernel without metadata.

Times are written as Kineto writes them: microseconds with 3 decimals.
"""
from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Tuple

from perfetto_graph_ann.join.model import LaneLayout, Placement

CPU_PID = CPU_TID = 4242


def _us(ns: int) -> Decimal:
    return (Decimal(ns) / 1000).quantize(Decimal("0.001"))


class _Builder:
    def __init__(self):
        self.events: List[Dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "ts": 0, "pid": CPU_PID, "tid": 0, "args": {"name": "python3"}},
            {"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "python3"}},
            {"name": "process_labels", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        ]
        self.corr = 100

    def cpu(self, name: str, ts: int, dur: int, correlation: int) -> int:
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": CPU_PID, "tid": CPU_TID,
                            "ts": _us(ts), "dur": _us(dur), "args": {"correlation": correlation}})
        return len(self.events) - 1

    def gpu(self, name: str, ts: int, dur: int, stream: int, correlation: int, cat: str = "kernel",
            **extra: Any) -> int:
        args = {"queued": 0, "device": 0, "context": 1, "stream": stream, "correlation": correlation}
        args.update(extra)
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": _us(ts),
                            "dur": _us(dur), "args": args})
        return len(self.events) - 1

    def next_corr(self) -> int:
        self.corr += 7
        return self.corr

    def finish(self, path: Path, t0: int, t1: int) -> List[Dict[str, Any]]:
        self.events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                            "tid": "PyTorch Profiler", "ts": _us(t0), "dur": _us(t1 - t0), "args": {"Op count": 0}})
        self.events.append({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": _us(t1 + 1500)})
        doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}],
               "baseTimeNanoseconds": 1700000000000000000, "traceEvents": self.events}
        path.write_text(json.dumps(doc, default=lambda d: _RawDecimal(d)).replace('"__RAW__', "").replace('__RAW__"', ""))
        return self.events


class _RawDecimal(str):
    def __new__(cls, d: Decimal):
        return str.__new__(cls, f"__RAW__{format(d, 'f')}__RAW__")


def _eager_collective(name: str, dtype: str, in_n: int, out_n: int, n: int) -> Dict[str, Any]:
    return {"Collective name": name, "In msg nelems": in_n, "Out msg nelems": out_n, "Group size": n,
            "dtype": dtype, "In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
            "Process Group Description": "default_pg", "Process Group Ranks": str(list(range(n)))}


def overlap_trace(path: Path, seed: int = 6) -> Tuple[List[Dict[str, Any]], LaneLayout]:
    rng = random.Random(seed)
    b = _Builder()
    placements: Dict[int, Placement] = {}
    t = 1_000_000_000
    t0 = t - 50_000
    graph_id = 3
    allreduce = _eager_collective("allreduce", "Float", 1 << 20, 1 << 20, 2)
    for replay in range(6):
        corr = b.next_corr()
        b.cpu("cudaGraphLaunch", t - rng.randint(5_000, 40_000), rng.randint(3_000, 20_000), corr)
        node = 0
        # stream 7 and stream 20 kernels, both gathered into lane 61: they overlap on the lane
        s7 = t + rng.randint(0, 900)
        s20 = s7 if replay % 2 == 0 else s7 + rng.randint(1, 5_000)  # equal starts on even replays
        for k in range(4):
            for stream, start in ((7, s7), (20, s20)):
                d = rng.randint(2_000, 30_000) + rng.choice([0, 1, 7, 499])
                i = b.gpu(f"gemm_{k % 3}", start, d, stream, corr)
                placements[i] = Placement(61, {"name": "mlp", "original_stream": stream, "graph id": graph_id,
                                               "graph node id": (graph_id << 32) | node, "replay": replay,
                                               "join": "exact"})
                node += 1
                if stream == 7:
                    s7 = start + d + (0 if k == 1 else rng.randint(0, 3_000))  # k == 1: touching
                else:
                    s20 = start + d + rng.randint(0, 3_000)
        # an NCCL kernel on stream 30, moved to lane 60, overlapping the compute partly
        nccl_ts = t + rng.randint(20_000, 60_000)
        nccl_dur = rng.randint(40_000, 120_000)
        i = b.gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", nccl_ts, nccl_dur, 30, corr)
        placements[i] = Placement(60, dict(allreduce, **{"original_stream": 30, "graph id": graph_id,
                                                         "graph node id": (graph_id << 32) | node,
                                                         "replay": replay, "join": "structural"}))
        # a kernel left on its stream (stream 7, not placed: e.g. unmatched)
        b.gpu("add_kernel", max(s7, nccl_ts + nccl_dur) + 1_000, 1_500, 7, corr)
        t = max(s7, s20, nccl_ts + nccl_dur) + rng.randint(50_000, 150_000)
    # eager collectives of every type, with their launches
    eager = [
        ("ncclDevKernel_AllGather_RING_LL", _eager_collective("_allgather_base", "Half", 1000, 4000, 4)),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", _eager_collective("reduce_scatter", "BFloat16", 8192, 1024, 8)),
        ("ncclDevKernel_Broadcast_RING_LL", _eager_collective("broadcast", "Float", 4096, 4096, 4)),
        ("ncclDevKernel_SendRecv", _eager_collective("all_to_all", "Float", 6000, 6000, 3)),
        ("ncclDevKernel_SendRecv", _eager_collective("send", "Double", 512, 0, 2)),
        ("ncclDevKernel_Reduce_Sum_f32_RING_LL", _eager_collective("reduce", "Float", 333, 333, 2)),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", _eager_collective("allreduce", "SomeNewType", 10, 10, 2)),
    ]
    for name, args in eager:
        corr = b.next_corr()
        b.cpu("cudaLaunchKernelExC", t, 9_000, corr)
        b.gpu(name, t + 12_000, rng.randint(5_000, 90_000), 30, corr, **args)
        b.gpu("compute_kernel", t + 15_000, rng.randint(5_000, 50_000), 7, b.next_corr())
        t += 200_000
    layout = LaneLayout(placements=placements,
                        lane_names={(0, 61): "61 mlp", (0, 60): "60 default_pg (allreduce)"}, graph_lanes="all")
    events = b.finish(path, t0, t)
    return events, layout


def gaps_trace(path: Path, seed: int = 7) -> Tuple[List[Dict[str, Any]], LaneLayout]:
    rng = random.Random(seed)
    b = _Builder()
    t = 5_000_000
    t0 = t
    for k in range(25):
        corr = b.next_corr()
        b.cpu("cudaLaunchKernel", t, 4_000, corr)
        dur = 0 if k == 11 else rng.randint(1_000, 20_000) + rng.choice([0, 3, 501])
        b.gpu(f"kernel_{k % 4}", t + 6_000, dur, 7, corr)
        if k % 5 == 0:
            c2 = b.next_corr()
            b.cpu("cudaMemcpyAsync", t + 1_000, 3_000, c2)
            b.gpu("Memcpy HtoD (Pageable -> Device)", t + 30_000, rng.randint(500, 8_000), 13, c2, cat="gpu_memcpy")
        if k % 7 == 0:
            c3 = b.next_corr()
            b.gpu("Memset (Device)", t + 45_000, rng.randint(200, 900), 13, c3, cat="gpu_memset")
        if k == 17:  # a kernel starting exactly where the previous one ends: no gap between them
            b.gpu("kernel_touching", t + 6_000 + dur, 2_000, 7, b.next_corr())
        t += rng.randint(25_000, 400_000)  # idle gaps of varied length
    corr = b.next_corr()
    b.cpu("cudaLaunchKernelExC", t, 5_000, corr)
    b.gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 7_000, 55_555, 7, corr)
    t += 100_000
    events = b.finish(path, t0, t)
    return events, LaneLayout()
