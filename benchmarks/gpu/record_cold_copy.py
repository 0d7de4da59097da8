"""Record a graph whose device copy may replay as a kernel, with what the package joins of it (probe).

``probe_memcpy_kinds.py`` saw ``buf.copy_(y)`` captured by ``torch.cuda.graph`` with no eager copy
before it replay as the kernel ``memcpy128``; under ``pga.graph`` after an eager copy it replayed as
``Memcpy DtoD`` (tests/gpu/test_copy_nodes_gpu.py). This records the first case the way a user
meets it: one fresh process, ``pga.instrument()`` installed, the graph captured by
``torch.cuda.graph`` (``--keep``: kept and instantiated explicitly), ``--warm-copy``: an eager copy
between the same tensors first, three replays profiled and exported by ``pga.export``. Prints each
replay's GPU events (category, name) and the join's report, and writes the trace, the sidecar and
what it printed to ``--out`` (a folder; ``tests/data`` takes them as recorded data).

    python benchmarks/gpu/record_cold_copy.py --out DIR [--keep] [--warm-copy] [--calibrate]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", ".."), os.path.join(HERE, "..", "..", "tests", "gpu")]

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import perfetto_graph_ann as pga  # noqa: E402
from copy_graph import scale_copy_fill  # noqa: E402: tests/gpu/copy_graph.py
from perfetto_graph_ann.capture.export import chrome_trace_bytes, export  # noqa: E402

GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--warm-copy", action="store_true")
    ap.add_argument("--calibrate", action="store_true")
    args = ap.parse_args()
    case = f"{'warm' if args.warm_copy else 'cold'}_{'kept' if args.keep else 'instantiated'}_" \
           f"{'calibrated' if args.calibrate else 'structural'}"
    os.makedirs(args.out, exist_ok=True)
    pga.instrument(calibrate=args.calibrate)
    x = torch.randn(1024, 1024, device="cuda")
    buf = torch.empty_like(x)
    y = x * 2
    if args.warm_copy:
        buf.copy_(y)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph(keep_graph=args.keep)
    with torch.cuda.graph(g):
        z = scale_copy_fill(x, buf)
    if args.keep:
        g.instantiate()
    g.replay()
    torch.cuda.synchronize()
    ok = bool(torch.equal(z, torch.ones_like(z)))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
    raw = chrome_trace_bytes(prof)
    with open(os.path.join(args.out, case + ".json"), "wb") as f:
        f.write(raw)
    pga.save_annotations(os.path.join(args.out, case + ".annotations.json"))
    out_json = os.path.join(args.out, case + ".joined.json")
    result = {"case": case, "output_ok": ok}
    try:
        layout = export(prof, out_json, graph_lanes="none")
        result["report"] = layout.report.as_dict()
        events = json.loads(open(out_json).read())["traceEvents"]
    except Exception as e:  # a refusal is a result here
        result["export_error"] = f"{type(e).__name__}: {e}"
        events = json.loads(raw)["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch"}
    per = collections.defaultdict(list)
    for e in events:
        if e.get("cat") in GPU and e.get("args", {}).get("correlation") in launches:
            per[e["args"]["correlation"]].append(e)
    result["replays"] = [[(e["cat"], e["name"][:40], e["args"].get("name")) for e in sorted(evs, key=lambda e: e["ts"])]
                         for evs in per.values()]
    print(json.dumps(result), flush=True)
    with open(os.path.join(args.out, case + ".result.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
