"""Where an instrumented capture's time goes (GPU machine; issue 31's capture cost).

The 36-layer module decoder of ``module_capture.py`` captured in alternating arms (``plain``,
``inst``: ``instrument()``, ``wrap``: module scopes that scope nothing, ``full``: every module
call scoped, ``full_nowatch``: the same with ``PERFETTO_GRAPH_ANN_NODE_WATCH=0``, ``depth2`` /
``depth3``: scopes down to that depth only (the layers are at depth 2): 37 / 109 of the 325 calls). Per capture
it times the three parts seen from outside (``torch.cuda.graph`` entry, the captured forward,
exit + synchronize) and, inside, the package's own steps (each ``_Capture`` step, the session's
start and ``finish_capture``, the node table read, the module hooks' start and end): what is
left of the end is torch's ``capture_end`` (end of capture, instantiate). Medians; the ratio is
the median over rounds of capture / plain capture of the same round. Prints JSON. Not a test.

    python benchmarks/gpu/probe_capture_parts.py [--rounds 40] [--model toy|hf-llama]

``--model hf-llama``: the same arms on ``transformers``' own ``LlamaForCausalLM`` (``module_capture.py``'s,
474 module calls, 1,636 nodes; ``depth2`` / ``depth3`` then cut a different tree).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "tests", "gpu")]
from module_capture import MODELS, warmup  # noqa: E402

import perfetto_graph_ann as pga  # noqa: E402
from perfetto_graph_ann.capture import api, backends, modules, session  # noqa: E402

STEPS: "collections.Counter[str]" = collections.Counter()


def timed(owner, name, label):
    orig = getattr(owner, name)

    def run(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return orig(*args, **kwargs)
        finally:
            STEPS[label] += time.perf_counter() - t0
    setattr(owner, name, run)


def install_timers():
    for name in ("prepare", "started", "ending", "ended"):
        timed(api._Capture, name, f"capture.{name}")
    timed(session.CaptureSession, "start", "session.start")
    timed(session.CaptureSession, "finish_capture", "session.finish_capture")
    timed(session.CaptureSession, "_start_watch", "session._start_watch")
    timed(session.CaptureSession, "stop_watch", "session.stop_watch")
    from perfetto_graph_ann.capture import nodewatch
    timed(nodewatch.WATCH, "acquire", "nodewatch.acquire")
    timed(nodewatch.WATCH, "release", "nodewatch.release")
    timed(modules.HOOKS, "capture_started", "modules.capture_started")
    timed(modules.HOOKS, "capture_ended", "modules.capture_ended")
    backend = backends.active()
    timed(type(backend), "raw_table", "backend.raw_table")
    return backend.name


def capture(model, x, pool, gc_off=False):
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    STEPS.clear()
    if gc_off:
        gc.disable()
    t0 = time.perf_counter()
    with torch.cuda.graph(g, pool=pool):
        t1 = time.perf_counter()
        out = model(x)
        t2 = time.perf_counter()
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    gc.enable()
    return (t3 - t0, t1 - t0, t2 - t1, t3 - t2, dict(STEPS)), g, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--arms", default="plain,inst,wrap,full,full_nowatch",
                    help="comma-separated; an arm ending in _gcoff runs its capture with the GC disabled")
    ap.add_argument("--micro", type=int, default=0, help="also: N empty leaf modules in one capture, us a call")
    ap.add_argument("--micro-launch", type=int, default=0,
                    help="also: N leaf modules that launch one kernel each, in one capture, us a call")
    ap.add_argument("--micro-only", action="store_true", help="only the micro measurements")
    ap.add_argument("--model", choices=sorted(MODELS), default="toy",
                    help="toy: the decoder of module_capture.py; hf-llama: transformers' LlamaForCausalLM there")
    ap.add_argument("--settle", action="store_true",
                    help="an untimed plain capture before every timed one (as module_capture.py --settle)")
    args = ap.parse_args()
    model, x, calls = MODELS[args.model](36, 16)
    backend = install_timers()
    arms = args.arms.split(",")
    configs = {"inst": None, "wrap": pga.ModuleScopes(exclude=("*",)), "full": pga.ModuleScopes(),
               "full_nowatch": pga.ModuleScopes(), "depth2": pga.ModuleScopes(max_depth=2),
               "depth3": pga.ModuleScopes(max_depth=3)}
    got = {a: [] for a in arms}
    keep, pool, equal = [], None, True
    med = statistics.median
    with torch.no_grad():
        warmup(lambda: model(x))
        for r in range(0 if args.micro_only else args.rounds):
            outs = []
            for arm in (arms if r % 2 == 0 else arms[::-1]):
                base, gc_off = arm.replace("_gcoff", ""), arm.endswith("_gcoff")
                os.environ["PERFETTO_GRAPH_ANN_NODE_WATCH"] = "0" if base == "full_nowatch" else "1"
                if args.settle:
                    capture(model, x, pool)
                if base == "plain":
                    t, g, out = capture(model, x, pool, gc_off)
                else:
                    kw = {} if configs[base] is None else {"modules": configs[base]}
                    with pga.instrument(calibrate=False, **kw):
                        t, g, out = capture(model, x, pool, gc_off)
                pool = g.pool() if pool is None else pool
                keep.append(g)
                outs.append((g, out))
                got[arm].append(t)
            for g, _ in outs:
                g.replay()
            torch.cuda.synchronize()
            equal = equal and all(torch.equal(outs[0][1], o) for _, o in outs[1:])
            del keep[:-len(arms)]
    rep = {"backend": backend, "model": args.model, "module_calls": calls, "rounds": args.rounds}
    if not args.micro_only:
        plain = [t[0] for t in got[arms[0]]]
        rep |= {"outputs_bitwise_equal": equal,
               "pairs": {a: round(med([t[0] / p for t, p in zip(v, plain)]), 4) for a, v in got.items()},
               "ms": {a: {part: round(med(t[i] for t in v) * 1e3, 3) for i, part in
                          enumerate(("total", "begin", "body", "end"), 0)} for a, v in got.items()},
               "steps_ms": {a: {k: round(med(t[4].get(k, 0.0) for t in v) * 1e3, 3)
                                for k in sorted({k for t in v for k in t[4]})} for a, v in got.items()}}
    if args.micro:
        rep["micro_us_a_call"] = micro(args.micro, args.rounds, configs)
    if args.micro_launch:
        rep["micro_launch_us_a_call"] = micro(args.micro_launch, args.rounds, configs, LaunchLeaf)
    print(json.dumps(rep, indent=1), flush=True)


class Leaf(torch.nn.Module):
    def forward(self, h):
        return h


class LaunchLeaf(torch.nn.Module):
    def forward(self, h):
        return h.add_(1)


class Many(torch.nn.Module):
    def __init__(self, n, leaf=Leaf):
        super().__init__()
        self.leaves = torch.nn.ModuleList(leaf() for _ in range(n))

    def forward(self, h):
        for leaf in self.leaves:
            h = leaf(h)
        return h


def micro(n, rounds, configs, leaf=Leaf):
    """N module calls that launch nothing (``leaf=LaunchLeaf``: one kernel each), inside a
    capture of one kernel: the wrapper's and a scope's own cost a call, with no other torch
    work between them."""
    model, x = Many(n, leaf).cuda(), torch.zeros(8, device="cuda")
    times = {a: [] for a in ("plain", "wrap", "full")}
    with torch.no_grad():
        for r in range(rounds):
            for arm in times:
                g = torch.cuda.CUDAGraph()
                ctx = pga.instrument(calibrate=False, modules=configs[arm]) if arm != "plain" else None
                with ctx or contextlib.nullcontext():
                    with torch.cuda.graph(g):
                        y = x + 1
                        t0 = time.perf_counter()
                        model(y)
                        times[arm].append(time.perf_counter() - t0)
    base = statistics.median(times["plain"])
    return {a: round((statistics.median(v) - base) / n * 1e6, 3) for a, v in times.items()} | {
        "plain_abs": round(base / n * 1e6, 3)}


if __name__ == "__main__":
    main()
