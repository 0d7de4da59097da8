"""CUPTI initialised when CUDA starts, not in the first capture (issue 31's capture cost).

Run as its own process (tests/gpu/run_all.sh runs each file so): ``instrument()`` must run
before the process initialises CUDA, and torch's profiler must not have started yet.

Under ``instrument(modules=True)``, CUDA's initialisation starts a thread that subscribes to
CUPTI and unsubscribes (its first subscription, ~20 ms on the H200). Checked here: the thread
did it and left nothing subscribed; the first capture's module scopes read the callback's count
and equal a capture with the driver positioning edges; torch.profiler then still records the
replay's kernels (CUPTI was free for it).
"""
from __future__ import annotations

import os
import time

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture import fastpath, instrument as inst, nodewatch
from perfetto_graph_ann.capture.registry import REGISTRY

pytestmark = pytest.mark.gpu
DIM = 256


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(DIM, 4 * DIM)
        self.down = torch.nn.Linear(4 * DIM, DIM)

    def forward(self, h):
        return h + self.down(torch.nn.functional.gelu(self.up(h)))


def capture(model, x):
    REGISTRY.clear()
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        model(x)
    g.replay()
    torch.cuda.synchronize()
    return g, [(n.kernel, tuple(sorted(n.annotation.items()))) for n in REGISTRY.records()[-1].nodes]


def test_cuda_start_initialises_cupti_and_the_profiler_still_records(results):
    assert not torch.cuda.is_initialized(), "run this file in its own process, before anything uses CUDA"
    pga.instrument(modules=True, calibrate=False)
    t0 = time.perf_counter()
    model = torch.nn.Sequential(*(Block() for _ in range(4))).cuda()  # CUDA starts here
    init_s = time.perf_counter() - t0
    deadline = time.monotonic() + 10
    while not nodewatch.WATCH.warmed and time.monotonic() < deadline:
        time.sleep(0.005)
    waited_s = time.perf_counter() - t0
    fast = fastpath.module()
    assert nodewatch.WATCH.warmed, f"CUPTI not initialised at CUDA's start (refused: {nodewatch.WATCH.refused})"
    assert nodewatch.WATCH.users == 0 and not fast.watch_subscribed()
    x = torch.randn(32, DIM, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            model(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    g, first = capture(model, x)
    first_ms = (time.perf_counter() - t) * 1e3
    assert not fast.watch_subscribed()
    os.environ["PERFETTO_GRAPH_ANN_NODE_WATCH"] = "0"
    try:
        _, driver = capture(model, x)
    finally:
        del os.environ["PERFETTO_GRAPH_ANN_NODE_WATCH"]
    assert first == driver and any(dict(a).get("module") == "0.up" for _, a in first)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    results["cupti_warm"] = {"cuda_start_s": round(init_s, 4), "warm_done_within_s": round(waited_s, 4),
                             "first_capture_ms": round(first_ms, 3), "nodes": len(first),
                             "profiled_gpu_events": len(kernels), "refused": nodewatch.WATCH.refused}
    inst.uninstrument()
    assert kernels, "torch.profiler recorded no GPU work after the warm-up"
