"""Does detaching CUPTI (``cuptiFinalize``) give plain captures back their speed, and what does
initialising it again cost? (issue 31: CUPTI's lasting cost on every capture of a process)

One process, single-threaded: the 36-layer decoder captured plain ``--captures`` times in each
phase: ``none`` (CUPTI never initialised), ``init`` (after a subscribe + unsubscribe, what the
node watch's warm-up does), ``detached`` (after ``cuptiFinalize``, at an API exit call site as
``NodeWatch.detach`` runs it; session 17's first runs called it directly), then ``init`` and
``detached`` again. Times the init and finalize calls. Then torch.profiler profiles one replay and
an eager matmul: does Kineto still record GPU kernels after our detach? Prints JSON.

    python benchmarks/gpu/probe_cupti_detach.py [--captures 8]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "gpu"))

import torch  # noqa: E402

from blocks import decoder_weights, warmup  # noqa: E402
from module_capture import Decoder, capture_once  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--captures", type=int, default=8)
    args = ap.parse_args()
    torch.cuda.init()
    from probe_util import CuptiSwitch

    cupti = CuptiSwitch()
    model = Decoder(decoder_weights(36))
    x = torch.randn(16, 128, 1024, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1)).to(torch.bfloat16)
    rep: dict = {"phases": [], "calls_ms": []}
    pool, keep = None, []

    def phase(name: str) -> None:
        nonlocal pool
        ts = []
        with torch.no_grad():
            for _ in range(args.captures):
                t, g, _ = capture_once(model, x, pool)
                pool = g.pool() if pool is None else pool
                keep.append(g)
                ts.append(round(t * 1e3, 3))
        rep["phases"].append({"phase": name, "ms": ts, "median": statistics.median(ts)})

    def call(name: str, fn) -> int:
        t = time.perf_counter()
        rc = fn()
        rep["calls_ms"].append({"call": name, "ms": round((time.perf_counter() - t) * 1e3, 3), "rc": rc})
        return rc

    with torch.no_grad():
        warmup(lambda: model(x))
    phase("first")  # a process's first captures pay once, whatever CUPTI does
    phase("none")
    for time_ in ("", " again", " third"):
        call("init" + time_, cupti.init)
        phase("init" + time_)
        call("finalize" + time_, cupti.detach)
        phase("detached" + time_)
    # Kineto after our detach
    g = keep[-1]
    a = torch.randn(512, 512, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.mm(a, a)
        torch.cuda.synchronize()
    gpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    rep["profiler_gpu_events"] = len(gpu)
    rep["profiler_gpu_names"] = sorted({e.name for e in gpu})[:5]
    print(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
