"""CUPTI this package initialised is detached again once captures and calibration are done
(an initialised CUPTI makes every graph launch cost several times more host time).

Run as its own process (tests/gpu/run_all.sh runs each file so): torch's profiler must not
have started before it. One process, in order:

1. a graph of 64 small kernels captured plain: its replay's host time with CUPTI never
   initialised (``none``);
2. the same work captured under ``instrument(modules=True)``: the node watch initialises CUPTI;
   the replay right after (``attached``), then after the detach delay (``detached``), which must
   be back near ``none``; the module scopes are there;
3. ``pga.graph`` with calibration: the first replay's activity session initialises CUPTI again;
   its table is whole; detached again after the delay;
4. ``instrument()`` and a capture that opens no scope: the cupti backend's id calls initialise
   CUPTI; detached after the delay;
5. torch.profiler still records the replays' kernels after our detaches, and the calibrated
   graph's 64 kernels join by the calibration taken before the last detach.
"""
from __future__ import annotations

import os
import statistics
import time

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture import fastpath, instrument as inst, nodewatch
from perfetto_graph_ann.capture.registry import REGISTRY

pytestmark = pytest.mark.gpu
DELAY_MS = 200


class Adds(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def forward(self, x):
        for _ in range(self.n):
            x.add_(1)
        return x


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Adds(32)
        self.b = Adds(32)

    def forward(self, x):
        return self.b(self.a(x))


def replay_us(g, n: int = 400) -> float:
    blocks = []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            g.replay()
        blocks.append((time.perf_counter() - t) / n * 1e6)
        torch.cuda.synchronize()
    return round(statistics.median(blocks), 3)


def wait_detached(before: int) -> bool:
    deadline = time.monotonic() + 10
    while nodewatch.WATCH.detaches == before and time.monotonic() < deadline:
        time.sleep(0.01)
    return nodewatch.WATCH.detaches > before


def test_cupti_is_detached_after_captures_and_calibration(results, tmp_path):
    assert not torch.cuda.is_initialized(), "run this file in its own process, before anything uses CUDA"
    os.environ.pop("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", None)
    default = nodewatch.detach_delay_from_env()  # unset: on from driver 13.0 (the H200's 580 is 13.0)
    results["cupti_detach_default_s"] = default
    assert default == nodewatch.DEFAULT_DETACH_S, default
    os.environ["PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS"] = str(DELAY_MS)
    model = Model()
    x = torch.zeros(16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        model(x)
    torch.cuda.current_stream().wait_stream(s)
    plain = torch.cuda.CUDAGraph()
    with torch.cuda.graph(plain):
        model(x)
    none_us = replay_us(plain)
    assert not nodewatch.WATCH.attached

    pga.instrument(modules=True, calibrate=False)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model(x)
    g.replay()
    torch.cuda.synchronize()
    modules = {n.annotation.get("module") for n in REGISTRY.records()[-1].nodes}
    assert {"a", "b"} <= modules, modules
    assert nodewatch.WATCH.attached, "the node watch did not initialise CUPTI (refused: %s)" % nodewatch.WATCH.refused
    attached_us = replay_us(g, 100)  # inside the delay: may run into the detach, a lower bound
    assert wait_detached(0), f"not detached (refused: {nodewatch.WATCH.detach_refused})"
    detached_us = replay_us(g)
    plain_after_us = replay_us(plain)
    inst.uninstrument()

    cal = torch.cuda.CUDAGraph()
    with pga.graph(cal, calibrate=True):
        with pga.mark_kernels("adds"):
            model(x)
    cal.replay()  # calibrated: CUPTI's activity API initialises it again
    torch.cuda.synchronize()
    rec = REGISTRY.get(cal._pga_owner)
    assert rec.calibrated and rec.calibration_note is None, rec.calibration_note
    assert sum(1 for n in rec.nodes if n.ordinal is not None) == 64
    assert wait_detached(1), f"not detached after calibration (refused: {nodewatch.WATCH.detach_refused})"
    after_cal_us = replay_us(cal)

    pga.instrument(calibrate=False)  # no scope at all: the cupti backend's id calls initialise CUPTI
    bare = torch.cuda.CUDAGraph()
    with torch.cuda.graph(bare):
        model(x)
    bare.replay()
    torch.cuda.synchronize()
    assert wait_detached(2), f"not detached after a capture without scopes (refused: {nodewatch.WATCH.detach_refused})"
    bare_us = replay_us(bare)
    inst.uninstrument()

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        g.replay()
        cal.replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    # the calibration was taken in a CUPTI detached since: its 64 kernels still join by it
    layout = pga.export(prof, tmp_path / "after_detach.pftrace")
    results["export_after_detach"] = {"matched": dict(layout.report.matched), "unmatched": layout.report.unmatched}
    assert layout.report.matched["calibrated"] == 64, results["export_after_detach"]
    results["cupti_detach"] = {"replay_us": {"none": none_us, "attached (<= delay)": attached_us,
                                             "detached": detached_us, "plain graph after": plain_after_us,
                                             "after calibration, detached": after_cal_us,
                                             "no scopes, detached": bare_us},
                               "detaches": nodewatch.WATCH.detaches, "profiled_gpu_events": len(kernels),
                               "capture_path": fastpath.describe()}
    assert len(kernels) >= 128, "torch.profiler recorded no GPU work after the detach"
    assert max(detached_us, plain_after_us, after_cal_us, bare_us) < 2.0 * none_us, results

