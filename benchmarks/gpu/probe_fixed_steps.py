"""Where ``pga.graph``'s fixed cost goes, step by step, inside real captures (GPU probe).

``python3 benchmarks/gpu/probe_fixed_steps.py [--layers 1 8] [--captures 30]``: interleaved
captures of the seed block (``layers`` chained blocks) with ``torch.cuda.graph`` (plain),
``pga.graph`` around the unannotated code (fixed cost only) and ``pga.graph`` with the
scopes; every step of ``pga.graph``'s enter and exit is wrapped with a timer (the wrappers'
own cost, ~0.1-0.3 us each, is included). Prints JSON: medians in us. Not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict

import torch

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests")]
import perfetto_graph_ann as pga  # noqa: E402
from blocks import seed_block, warmup  # noqa: E402
from perfetto_graph_ann.capture import api, backends, collectives  # noqa: E402
from perfetto_graph_ann.capture import session as S  # noqa: E402

STEPS: dict = defaultdict(list)
_clock = time.perf_counter_ns


def timed(owner, name, label=None):
    fn = getattr(owner, name)
    key = label or name

    def run(*a, **k):
        t0 = _clock()
        try:
            return fn(*a, **k)
        finally:
            STEPS[key].append(_clock() - t0)

    setattr(owner, name, run)


def capture_us(fn, mode: str) -> float:
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    t0 = _clock()
    with (torch.cuda.graph(g) if mode == "plain" else pga.graph(g, calibrate=False)):
        fn()
    torch.cuda.synchronize()
    dt = (_clock() - t0) / 1e3
    g.reset()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--captures", type=int, default=30)
    args = ap.parse_args()
    torch.cuda.init()
    be = backends.active()
    for name in ("capture_graph", "graph_id", "clone_graph", "exec_id", "node_count", "add_marker"):
        timed(be, name, "backend." + name)
    for name in ("__init__", "start", "finish_capture", "bind_exec", "records"):
        if hasattr(S.CaptureSession, name):
            timed(S.CaptureSession, name, "session." + name)
    timed(S.ScopeRecorder, "records", "recorder.records")
    for name in ("push", "pop"):
        timed(S, name, "session." + name)
    for name in ("_attach", "_bind", "_owner"):
        timed(api, name, "api." + name)
    timed(collectives, "install", "collectives.install")
    timed(collectives, "uninstall", "collectives.uninstall")
    timed(api.graph, "__enter__", "pga.graph.__enter__ (all)")
    timed(api.graph, "__exit__", "pga.graph.__exit__ (all)")
    out = {"device": torch.cuda.get_device_name(), "backend": pga.backend_info()["backend"]}
    for layers in args.layers:
        plain_fn, ann_fn = seed_block(annotate=False, layers=layers), seed_block(annotate=True, layers=layers)
        warmup(plain_fn)
        warmup(ann_fn)
        for _ in range(3):
            capture_us(plain_fn, "pga"), capture_us(ann_fn, "pga")
        STEPS.clear()
        tot = defaultdict(list)
        for _ in range(args.captures):
            tot["plain"].append(capture_us(plain_fn, "plain"))
            tot["pga, no scopes"].append(capture_us(plain_fn, "pga"))
            tot["pga, scopes"].append(capture_us(ann_fn, "pga"))
        n_caps = 2 * args.captures
        res = {k: round(statistics.median(v), 1) for k, v in tot.items()}
        res["fixed pct"] = round((res["pga, no scopes"] / res["plain"] - 1) * 100, 1)
        res["total pct"] = round((res["pga, scopes"] / res["plain"] - 1) * 100, 1)
        # per capture: sum of a step's calls in a capture, median over captures (counted over both pga modes)
        res["steps_us_per_capture_mean"] = {k: round(sum(v) / 1e3 / n_caps, 2) for k, v in sorted(STEPS.items())}
        res["steps_calls_per_capture"] = {k: round(len(v) / n_caps, 1) for k, v in sorted(STEPS.items())}
        res["steps_us_per_call_median"] = {k: round(statistics.median(v) / 1e3, 2) for k, v in sorted(STEPS.items())}
        out[f"layers={layers}"] = res
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
