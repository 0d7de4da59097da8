"""Is it the class attribute swap? (GPU machine; issue 31's capture cost.)

Module scopes set ``nn.Module.__call__`` when a capture starts and put it back when it ends.
Changing a class attribute bumps the type's version, which invalidates CPython's specialised
attribute and call caches for ``nn.Module`` and every subclass, so the model's Python may run
de-optimised through the capture. Arms on the 36-layer module decoder (alternating rounds):

- ``plain``; ``toggle``: a pass-through ``__call__`` set before each capture and put back
  after (the swap alone); ``inst``: ``instrument()``; ``wrap``: module scopes that scope nothing
  (the wrapper alone); ``depth0``: only the root scoped; ``full``: every module call scoped.

Then the steady state of a pass-through installed once: plain captures and eager forwards with
and without it. Prints JSON. Not a test.

    python benchmarks/gpu/probe_module_toggle.py [--rounds 12]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "tests", "gpu")]
from module_capture import Decoder, capture_once, decoder_weights, warmup  # noqa: E402

import perfetto_graph_ann as pga  # noqa: E402

ORIG = torch.nn.Module.__call__
PARTS: dict = {}


def capture_parts(arm, model, x, pool):
    """capture_once, with its three parts timed: begin, the captured code, end (+ sync)."""
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.cuda.graph(g, pool=pool):
        t1 = time.perf_counter()
        out = model(x)
        t2 = time.perf_counter()
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    PARTS.setdefault(arm, []).append((t1 - t0, t2 - t1, t3 - t2))
    return t3 - t0, g, out


def passthrough(self, *args, **kwargs):
    return ORIG(self, *args, **kwargs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()
    model = Decoder(decoder_weights(36))
    x = torch.randn(16, 128, 1024, device="cuda").to(torch.bfloat16)
    arms = ["plain", "toggle", "inst", "wrap", "depth0", "full"]
    configs = {"inst": None, "wrap": pga.ModuleScopes(exclude=("*",)), "depth0": pga.ModuleScopes(max_depth=0),
               "full": pga.ModuleScopes()}
    secs = {a: [] for a in arms}
    keep, pool = [], None
    med = statistics.median
    with torch.no_grad():
        warmup(lambda: model(x))
        for r in range(args.rounds):
            for arm in (arms if r % 2 == 0 else arms[::-1]):
                if arm == "toggle":
                    torch.nn.Module.__call__ = passthrough
                    t, g, _ = capture_once(model, x, pool)
                    torch.nn.Module.__call__ = ORIG
                elif arm == "plain":
                    t, g, _ = capture_parts(arm, model, x, pool)
                else:
                    kw = {} if configs[arm] is None else {"modules": configs[arm]}
                    with pga.instrument(calibrate=False, **kw):
                        t, g, _ = capture_parts(arm, model, x, pool)
                pool = g.pool() if pool is None else pool
                keep.append(g)
                secs[arm].append(t)
        out = {"pairs": {a: round(med([t / p for t, p in zip(v, secs["plain"])]), 4) for a, v in secs.items()},
               "capture_ms": {a: round(med(v) * 1e3, 3) for a, v in secs.items()},
               "parts_ms (begin, body, end)": {a: [round(med(p[i] for p in v) * 1e3, 3) for i in range(3)]
                                               for a, v in PARTS.items()}}

        def eager(n=30):
            ts = []
            for _ in range(n):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                model(x)
                torch.cuda.synchronize()
                ts.append(time.perf_counter() - t0)
            return med(ts) * 1e3

        steady = {"eager_ms_before": eager()}
        caps = {"without": [], "with": []}
        for r in range(args.rounds):
            for arm in (("without", "with") if r % 2 == 0 else ("with", "without")):
                if arm == "with":
                    torch.nn.Module.__call__ = passthrough
                    model(x)  # warm the wrapper's call sites (not timed)
                t, g, _ = capture_once(model, x, pool)
                keep.append(g)
                caps[arm].append(t)
                if arm == "with":
                    torch.nn.Module.__call__ = ORIG
        torch.nn.Module.__call__ = passthrough
        for _ in range(5):
            model(x)
        steady["eager_ms_with_passthrough"] = eager()
        torch.nn.Module.__call__ = ORIG
        for _ in range(5):
            model(x)
        steady["eager_ms_after"] = eager()
        steady["capture_ms"] = {a: round(med(v) * 1e3, 3) for a, v in caps.items()}
        out["steady"] = steady
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
