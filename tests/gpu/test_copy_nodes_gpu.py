"""A graph's device-to-device copy node, as the profile shows it, joined to its node.

On driver 13.0 (H100, torch 2.11) a memcpy node of a CUDA graph (``buf.copy_(y)`` between two
contiguous device tensors) replayed here as ``Memcpy DtoD`` (``gpu_memcpy``); in
``benchmarks/gpu/probe_memcpy_kinds.py`` (``torch.cuda.graph``, no eager copy first) the same copy
replayed as the kernel ``memcpy128`` (joined to its memcpy node: tests/test_join_copy_kernel.py).
Every event of every replay must get its node's scope, with and without calibration; the
expected scope of each event comes from the capture's own order, not the join. Four tests in one
process, so each export also meets the earlier tests' profiler windows (the case that found
session 42's windows fix). ``PGA_COPY_NODES_DUMP`` (a folder): each test's trace and sidecar are
written there (how ``tests/data/h100_windows/`` was recorded).
"""
from __future__ import annotations

import collections
import json
import os

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import perfetto_graph_ann as pga
from copy_graph import SCOPES, scale_copy_fill
from perfetto_graph_ann.capture.export import chrome_trace_bytes, export
from perfetto_graph_ann.capture.registry import REGISTRY
from perfetto_graph_ann.capture.replay_log import REPLAY_LOG

pytestmark = pytest.mark.gpu
GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def _capture(calibrate: bool, keep: bool):
    x = torch.randn(1024, 1024, device="cuda")
    buf = torch.empty_like(x)
    y = x * 2  # warm-up: every kernel loaded before the capture
    buf.copy_(y)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph(keep_graph=keep)
    with pga.graph(g, calibrate=calibrate):
        z = scale_copy_fill(x, buf)
    if keep:
        g.instantiate()
    return g, z


@pytest.mark.parametrize("keep", [False, True], ids=["instantiated", "kept"])
@pytest.mark.parametrize("calibrate", [True, False], ids=["calibrated", "structural"])
def test_copy_node_is_labelled_as_its_node(calibrate, keep, tmp_path, results):
    case = f"{'calibrated' if calibrate else 'structural'}_{'kept' if keep else 'instantiated'}"
    g, z = _capture(calibrate, keep)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(z, torch.ones_like(z))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
    raw = json.loads(chrome_trace_bytes(prof))["traceEvents"]
    launches = {e["args"]["correlation"] for e in raw if e.get("name") == "cudaGraphLaunch"}
    assert len(launches) == 3
    layout = export(prof, tmp_path / "out.json", graph_lanes="none")
    dump = os.environ.get("PGA_COPY_NODES_DUMP")  # a folder: the trace and annotations this export joined
    if dump:
        with open(os.path.join(dump, case + ".json"), "wb") as f:
            f.write(chrome_trace_bytes(prof))
        pga.save_annotations(os.path.join(dump, case + ".annotations.json"))
    window = REPLAY_LOG.windows[-1]
    diag = {"exec_id": g._pga_session.exec_id, "exec_handle": int(g.raw_cuda_graph_exec()),
            "logged": [(t.graphs, t.head_uncertain, t.tail_uncertain) for t in window.threads],
            "registry": sorted(r.exec_id for r in REGISTRY.snapshot().graphs)}
    events = json.loads((tmp_path / "out.json").read_text())["traceEvents"]
    per = collections.defaultdict(list)
    for e in events:
        if e.get("cat") in GPU and e["args"].get("correlation") in launches:
            per[e["args"]["correlation"]].append(e)
    shapes = {c: [(e["cat"], e["name"][:24]) for e in sorted(evs, key=lambda e: e["ts"])] for c, evs in per.items()}
    results[f"copy_nodes_{case}"] = {"replay_events": next(iter(shapes.values())),
                                     "report": layout.report.as_dict(), "diag": diag}
    assert len(per) == 3
    for evs in per.values():
        got = [e["args"].get("name") for e in sorted(evs, key=lambda e: e["ts"])]
        assert got == SCOPES, (got, shapes)
    assert layout.report.unmatched == 0
