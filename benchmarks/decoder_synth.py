"""The shape of the H200 export measurement on the CPU (issue 33): a graphed decoder, replayed.

``decoder_annotations(layers)`` is one calibrated graph of ``layers`` x 23 kernel nodes (36
layers: 828, as ``tests/gpu/blocks.py``'s decoder captured by ``benchmarks/gpu/export_pace.py``)
with its scope table (``{"name": "layer", "layer": i}`` around ``attn`` and ``mlp``);
``decoder_trace(replays, layers)`` the Kineto JSON of ``replays`` replays of it: per replay one
``cudaGraphLaunch`` (its ``ac2g`` start) and every node's kernel on stream 7 with Kineto's 12
kernel args and its ``ac2g`` end, as torch 2.11 writes them (no graph ids: the join calibrates).
100 replays of 36 layers: 82,800 kernels, about 75 MB, as on the H200.
"""
from __future__ import annotations

import dataclasses
import json
import random
import re
import zlib
from decimal import Decimal
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from perfetto_graph_ann.annotations.model import (AnnotationSet, GraphRecord, NodeRecord, ReplayThread, ReplayWindow,
                                                  ScopeInstance, rekey)

__all__ = ["BASE_TIME_NS", "EXEC_ID", "PER_LAYER", "decoder_annotations", "decoder_pieces", "decoder_trace",
           "write_decoder_trace"]

EXEC_ID = 2
BASE_TIME_NS = 1790857026000000000
PID, TID = 839, 1897135808
_EW = "void at::native::vectorized_elementwise_kernel<4, at::native::{0}, std::array<char*, {1}ul> >(int, at::native::{0}, std::array<char*, {1}ul>)"
_RED = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::MeanOps<float, float, "
        "float, float>, unsigned int, c10::BFloat16, 4, 4> >(at::native::ReduceOp<c10::BFloat16, at::native::MeanOps<float, "
        "float, float, float>, unsigned int, c10::BFloat16, 4, 4>)")
_GEMM = "nvjet_sm90_tst_{0}x{1}_64x3_2x1_v_bz_coopA_TNN"
_FLASH = ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, "
          "Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
          "(pytorch_flash::Flash_fwd_params)")
#: One layer's kernels in capture order: (part, name, grid, block); 23 of them.
_NORM = [("pow", _EW.format("pow_tensor_scalar_kernel<c10::BFloat16>", 2), (4096, 1, 1)),
         ("mean", _RED, (1024, 1, 1)),
         ("add", _EW.format("AUnaryFunctor<float, float, float, at::native::binary_internal::AddFunctor<float> >", 2), (16, 1, 1)),
         ("rsqrt", _EW.format("rsqrt_kernel_cuda<c10::BFloat16>", 2), (16, 1, 1)),
         ("mul", _EW.format("BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >", 3), (4096, 1, 1)),
         ("mul", _EW.format("BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >", 3), (4096, 1, 1))]
PER_LAYER: Tuple[Tuple[str, str, Tuple[int, int, int]], ...] = tuple(
    [("attn", n, g) for _, n, g in _NORM]
    + [("attn", _GEMM.format(128, 192), (16, 24, 1)),
       ("attn", _EW.format("direct_copy_kernel_cuda<c10::BFloat16>", 2), (2048, 1, 1)),
       ("attn", _EW.format("direct_copy_kernel_cuda<c10::BFloat16>", 2), (2048, 1, 1)),
       ("attn", _FLASH, (2, 16, 16)),
       ("attn", _EW.format("direct_copy_kernel_cuda<c10::BFloat16>", 2), (2048, 1, 1)),
       ("attn", _GEMM.format(128, 64), (16, 8, 1)),
       ("attn", _EW.format("CUDAFunctor_add<c10::BFloat16>", 3), (2048, 1, 1))]
    + [("mlp", n, g) for _, n, g in _NORM]
    + [("mlp", _GEMM.format(128, 352), (16, 44, 1)),
       ("mlp", _EW.format("silu_kernel<c10::BFloat16>", 2), (2816, 1, 1)),
       ("mlp", _EW.format("BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >", 3), (2816, 1, 1)),
       ("mlp", _GEMM.format(128, 64), (16, 8, 1))])
assert len(PER_LAYER) == 23


def decoder_annotations(layers: int = 36, record: Optional[Sequence[int]] = None) -> AnnotationSet:
    """The graph's record: calibrated (stream 7, ordinal = capture position), with scopes.

    ``record``: the Unix times (ns) of the replays' launches (``decoder_trace``'s ``launches``)
    to hold a replay record of them too (one profiler window, one thread), as
    ``recorded_annotations()`` has on the GPU machine: the join then maps launches to graphs."""
    nodes: List[NodeRecord] = []
    scopes: List[ScopeInstance] = []
    for layer in range(layers):
        lid = len(scopes)
        scopes.append(ScopeInstance(lid, {"name": "layer", "layer": layer}))
        part = {}
        for p in ("attn", "mlp"):
            part[p] = len(scopes)
            scopes.append(ScopeInstance(len(scopes), {"name": p}, lid))
        for p, name, grid in PER_LAYER:
            i = len(nodes)
            nodes.append(NodeRecord(key=(EXEC_ID << 32) | i, kernel=name, grid=grid, block=(128, 1, 1),
                                    annotation={"name": p, "layer": layer}, stream=7, ordinal=i,
                                    scopes=(lid, part[p])))
    windows = None
    if record is not None:
        windows = (ReplayWindow(PID, min(record) - 1_000_000, max(record) + 100_000_000,
                                (ReplayThread(TID, TID, (EXEC_ID,) * len(record), starts_ns=tuple(record)),)),)
    return AnnotationSet(graphs=(GraphRecord(EXEC_ID, tuple(nodes), scopes=tuple(scopes)),), replays=windows)


def with_batch_sizes(ann: AnnotationSet, graphs: int) -> AnnotationSet:
    """``ann`` with ``graphs`` graphs: its first, then copies of it under other executable ids
    whose kernels run on other grids (another batch size, as a serving engine captures one graph
    per batch size): the join tries each replay against them all and fits it to its own."""
    g0 = ann.graphs[0]
    more = tuple(dataclasses.replace(g0, exec_id=g0.exec_id + 100 + k, nodes=tuple(
        dataclasses.replace(n, key=rekey(g0.exec_id + 100 + k, n.key),
                            grid=(n.grid[0] + k + 1, *n.grid[1:]) if n.grid else n.grid) for n in g0.nodes))
        for k in range(graphs - 1))
    return dataclasses.replace(ann, graphs=(g0, *more))


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def decoder_trace(replays: int = 100, layers: int = 36, seed: int = 33, launches: Optional[List[int]] = None,
                  kineto_times: bool = True) -> bytes:
    """Kineto JSON (one event a line, as Kineto writes it) of ``replays`` replays; ``launches``
    (a list) gets the Unix time (ns) of each replay's launch. ``kineto_times``: every ``ts`` /
    ``dur`` with 3 decimals, as Kineto writes them (False: Python's shortest float text, which
    the reader takes on its slower exact path)."""
    text = "".join(decoder_pieces(replays, layers, seed, launches))
    return (_TIME.sub(_three_decimals, text) if kineto_times else text).encode()


def write_decoder_trace(path: str, replays: int = 100, layers: int = 36, seed: int = 33,
                        launches: Optional[List[int]] = None, kineto_times: bool = False) -> int:
    """:func:`decoder_trace`'s bytes written to ``path`` as they are made (traces of GBs);
    returns their size. ``kineto_times``: every ``ts`` / ``dur`` with 3 decimals, as Kineto
    writes them (``decoder_trace`` writes Python's shortest float text: ``...050.1``)."""
    size = 0
    with open(path, "w", encoding="ascii") as f:
        chunk: List[str] = []
        for piece in decoder_pieces(replays, layers, seed, launches):
            if kineto_times:
                piece = _TIME.sub(_three_decimals, piece)
            chunk.append(piece)
            if len(chunk) >= 8192:
                size += f.write("".join(chunk))
                chunk.clear()
        size += f.write("".join(chunk))
    return size


_TIME = re.compile(r'("(?:ts|dur)": )([0-9]+(?:\.[0-9]+)?)')


def _three_decimals(m: "re.Match[str]") -> str:
    return m.group(1) + format(Decimal(m.group(2)), ".3f")


def decoder_pieces(replays: int = 100, layers: int = 36, seed: int = 33,
                   launches: Optional[List[int]] = None) -> Iterator[str]:
    """:func:`decoder_trace`'s text in pieces, made as they are asked for."""
    rng = random.Random(seed)
    base = 5141861791000000
    meta: List[Dict[str, Any]] = []
    for pid, labels, sort in ((PID, "CPU", PID), (0, "GPU 0", 5000000)):
        meta += [{"name": "process_name", "ph": "M", "ts": _us(base), "pid": pid, "tid": 0, "args": {"name": "python3"}},
                 {"name": "process_labels", "ph": "M", "ts": _us(base), "pid": pid, "tid": 0, "args": {"labels": labels}},
                 {"name": "process_sort_index", "ph": "M", "ts": _us(base), "pid": pid, "tid": 0,
                  "args": {"sort_index": sort}}]
    meta += [{"name": "thread_name", "ph": "M", "ts": _us(base), "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
             {"name": "thread_sort_index", "ph": "M", "ts": _us(base), "pid": 0, "tid": 7, "args": {"sort_index": 7}}]
    head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "numSms": 132}],
            "cuda_driver_version": 13000, "displayTimeUnit": "ms", "baseTimeNanoseconds": BASE_TIME_NS}
    lines = ["{"] + [f'  {json.dumps(k)}: {json.dumps(v)},' for k, v in head.items()] + ['  "traceEvents": [']
    yield "\n".join(lines) + "\n" + ",\n".join(json.dumps(e) for e in meta)
    t = base + 50_000
    cpu = t
    corr = 8
    for _ in range(replays):
        launch_ts = max(cpu, t - 60_000)
        events: List[Dict[str, Any]] = []
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": PID, "tid": TID,
                       "ts": _us(launch_ts), "dur": _us(rng.randint(8_000, 70_000)),
                       "args": {"cbid": 311, "correlation": corr}})
        if launches is not None:
            launches.append(BASE_TIME_NS + launch_ts)
        events.append({"ph": "s", "id": corr, "pid": PID, "tid": TID, "ts": _us(launch_ts), "cat": "ac2g", "name": "ac2g"})
        cpu = launch_ts + 80_000
        t = max(t, launch_ts + 10_000)
        for _layer in range(layers):
            for _p, name, grid in PER_LAYER:
                dur = rng.randint(2_000, 60_000)
                regs = 16 + (zlib.crc32(name.encode()) & 127)
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": _us(t), "dur": _us(dur),
                               "args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": corr,
                                        "registers per thread": regs, "shared memory": 0 if grid[0] > 100 else 49152,
                                        "blocks per SM": round(grid[0] * grid[1] * grid[2] / 132, 6),
                                        "warps per SM": round(grid[0] * grid[1] * grid[2] * 4 / 132, 6),
                                        "grid": list(grid), "block": [128, 1, 1], "est. achieved occupancy %": 25}})
                events.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": _us(t), "cat": "ac2g", "name": "ac2g",
                               "bp": "e"})
                t += dur + rng.randint(1_000, 4_000)
        corr += 4
        t += rng.randint(5_000, 20_000)
        yield ",\n" + ",\n".join(json.dumps(e) for e in events)
    events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": PID, "tid": TID,
               "ts": _us(cpu), "dur": _us(max(1000, t - cpu)), "args": {"cbid": 165, "correlation": corr}}]
    events += [{"ph": "X", "cat": "Trace", "ts": _us(base), "dur": _us(t - base + 2000), "pid": "Spans",
                "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
               {"name": "process_sort_index", "ph": "M", "ts": _us(base), "pid": "Spans", "tid": 0,
                "args": {"sort_index": 536870912}},
               {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": _us(t + 3000)}]
    yield ",\n" + ",\n".join(json.dumps(e) for e in events) + "\n]}"
