"""Does an initialised CUPTI slow a process's eager launches and graph replays, and does detaching
it (``cuptiFinalize``) undo that? (issue 31: "with no profiler ever started, instrumenting changes
nothing observable beyond that capture cost")

One process, single-threaded, phases alternating: ``none`` (CUPTI never initialised), ``init``
(after one subscribe + unsubscribe: the node watch's warm-up), ``detached`` (after
``cuptiFinalize`` at an API exit call site, as ``NodeWatch.detach`` runs it; session 17's
first runs called it directly), twice. Per phase: host time per eager launch (``x.add_(1)`` on a tiny
tensor, ``--launches`` of them, medians of 5 blocks), per replay of a 64-kernel graph, and per
replay of the 36-layer decoder's graph (``module_capture.py``'s, batch 16, 828 kernels): host
time of the launch (``replay_us``) and wall time until the GPU is done (``decoder_replay_ms``).

    python benchmarks/gpu/probe_cupti_launch.py [--launches 20000]
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
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "gpu"))
from blocks import decoder_weights, warmup  # noqa: E402
from module_capture import Decoder, capture_once  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=20000)
    args = ap.parse_args()
    torch.cuda.init()
    from probe_util import CuptiSwitch

    cupti = CuptiSwitch()
    x = torch.zeros(16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            x.add_(1)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(64):
            x.add_(1)
    torch.cuda.synchronize()
    model = Decoder(decoder_weights(36))
    xd = torch.randn(16, 128, 1024, device="cuda").to(torch.bfloat16)
    with torch.no_grad():
        warmup(lambda: model(xd))
        _, gd, _ = capture_once(model, xd, None)

    def wall_ms(n=20):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            gd.replay()
        torch.cuda.synchronize()
        return round((time.perf_counter() - t) / n * 1e3, 4)

    def per_op_us(fn, n):
        blocks = []
        for _ in range(5):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                fn()
            blocks.append((time.perf_counter() - t) / n * 1e6)
            torch.cuda.synchronize()
        return round(statistics.median(blocks), 4)

    rep = []

    def phase(name):
        per_op_us(lambda: x.add_(1), 2000)  # settle
        rep.append({"phase": name, "eager_launch_us": per_op_us(lambda: x.add_(1), args.launches // 5),
                    "replay_us": per_op_us(g.replay, 400), "decoder_replay_us": per_op_us(gd.replay, 20),
                    "decoder_replay_ms": wall_ms()})

    phase("none")
    for i in range(2):
        assert cupti.init() == 0
        phase("init")
        assert cupti.detach() == 0
        phase("detached")
    print(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
