"""What a scope edge would cost as the capture's frontier instead of a node count (probe, issue 31).

A scope edge needs the position of the next node its graph will get. Today that is a count: CUPTI's
node-created callback (CUPTI initialised: ~1.065x on the whole capture), or the driver's
``cuGraphGetNodes`` count (grows with the graph), or an empty marker node (~3-5 us). The stream being
captured also knows its frontier: ``cuStreamGetCaptureInfo_v2`` gives the nodes the next captured
node will depend on. On one stream that is the last node captured, whose listing position + 1 is
the count. This probe, CUPTI never initialised, captures ``--nodes`` small kernels on one stream
and asks at every step:

- the frontier (``cuStreamGetCaptureInfo_v2`` with dependencies) and, once at the end, the listing:
  whether the frontier's node is always the last listed one (``frontier_is_last``);
- what each call costs from Python through ctypes, against ``cuCtxGetCurrent`` through ctypes (the
  floor of any ctypes call) and ``cuGraphGetNodes``' count, in batches of 1,000 calls at 10%, 50% and
  90% of the capture (us a call, median of 5 batches).

    python benchmarks/gpu/probe_capture_frontier.py [--nodes 2000] [--out FILE]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..")]

import torch  # noqa: E402


def _per_call_us(fn, n: int = 1000, rounds: int = 5) -> float:
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter_ns() - t0) / n / 1e3)
    return round(sorted(ts)[len(ts) // 2], 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--out")
    args = ap.parse_args()
    cu = ctypes.CDLL("libcuda.so.1")
    info = cu.cuStreamGetCaptureInfo_v2
    info.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint64),
                     ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p)),
                     ctypes.POINTER(ctypes.c_size_t)]
    get_nodes = cu.cuGraphGetNodes
    get_nodes.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    ctx_get = cu.cuCtxGetCurrent
    ctx_get.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    x = torch.zeros(64, device="cuda")
    x.add_(1)
    torch.cuda.synchronize()
    status, cid, graph = ctypes.c_int(), ctypes.c_uint64(), ctypes.c_void_p()
    deps, ndeps, count, ctx = ctypes.POINTER(ctypes.c_void_p)(), ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_void_p()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    frontier, costs = [], {}
    marks = {int(args.nodes * f): f for f in (0.1, 0.5, 0.9)}
    with torch.cuda.graph(g):
        s = torch.cuda.current_stream().cuda_stream

        def ask_frontier():
            return info(s, ctypes.byref(status), ctypes.byref(cid), ctypes.byref(graph), ctypes.byref(deps),
                        ctypes.byref(ndeps))

        def ask_count():
            return get_nodes(graph, None, ctypes.byref(count))

        def ask_ctx():
            return ctx_get(ctypes.byref(ctx))

        for i in range(args.nodes):
            rc = ask_frontier()
            frontier.append((rc, status.value, ndeps.value, deps[0] if ndeps.value else None))
            if i in marks:
                costs[marks[i]] = {"frontier": _per_call_us(ask_frontier), "count": _per_call_us(ask_count),
                                   "ctypes_floor": _per_call_us(ask_ctx)}
            x.add_(1)
        rc = ask_frontier()
        frontier.append((rc, status.value, ndeps.value, deps[0] if ndeps.value else None))
        raw_graph = graph.value
    n = ctypes.c_size_t()
    get_nodes(raw_graph, None, ctypes.byref(n))
    arr = (ctypes.c_void_p * n.value)()
    get_nodes(raw_graph, arr, ctypes.byref(n))
    pos = {h: i for i, h in enumerate(arr)}
    mismatches = [i for i, (rc, st, nd, d) in enumerate(frontier)
                  if rc != 0 or (i == 0 and nd != 0) or (i > 0 and (nd != 1 or pos.get(d) != i - 1))]
    g.instantiate()
    g.replay()
    torch.cuda.synchronize()
    out = {"nodes": n.value, "steps": len(frontier), "frontier_is_last": not mismatches,
           "mismatches": mismatches[:10], "output_ok": float(x[0]) == 1 + args.nodes,
           "us_per_call": costs}
    print(json.dumps(out), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
