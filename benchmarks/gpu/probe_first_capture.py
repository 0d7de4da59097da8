"""What a process's first instrumented capture pays once (GPU machine; issue 31).

In fresh processes the first instrumented capture of the module decoder took ~130 ms more than
a plain one (``module_capture_fresh.py``). This profiles it: ``instrument(modules=...)`` as
``perfetto-graph-ann run`` does, the model built and warmed up, then the first capture under
cProfile (top entries by cumulative time) and a second one timed. Not a test.

    python benchmarks/gpu/probe_first_capture.py [--modules] [--top 45]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "tests", "gpu")]
from module_capture import Decoder, capture_once, decoder_weights, warmup  # noqa: E402

import perfetto_graph_ann as pga  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modules", action="store_true")
    ap.add_argument("--top", type=int, default=45)
    args = ap.parse_args()
    pga.instrument(modules=args.modules, calibrate=False)
    model = Decoder(decoder_weights(36))
    x = torch.randn(16, 128, 1024, device="cuda").to(torch.bfloat16)
    with torch.no_grad():
        warmup(lambda: model(x))
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        _, g, _ = capture_once(model, x, None)
        prof.disable()
        first = time.perf_counter() - t0
        second, _, _ = capture_once(model, x, g.pool())
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(args.top)
    print(out.getvalue()[-9000:])
    print(f"first capture {first * 1e3:.1f} ms (profiled), second {second * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
