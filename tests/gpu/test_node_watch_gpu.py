"""Scope edges from CUPTI's node-created callback on a real driver (issue 31's capture cost).

Run as its own process (tests/gpu/run_all.sh runs each file so): the first tests need a
process where torch's profiler has not started yet (it subscribes to CUPTI for good).

1. Module scopes over a decoder whose MLP forks work to a side stream and joins it, captured
   with every edge verified against a listing (``PERFETTO_GRAPH_ANN_VERIFY_SCOPES=1``) while
   edges read the callback's count: the capture passes only if each count equals the
   listing's length; the nodes' annotations equal those of the same capture with the driver
   positioning edges (``PERFETTO_GRAPH_ANN_NODE_WATCH=0``).
2. After those captures a torch.profiler run still records kernels (the subscription ended);
   a capture after it finds CUPTI taken (refused, counted) and falls back to the driver with
   the same annotations.
"""
from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture import nodewatch
from perfetto_graph_ann.capture.registry import REGISTRY

pytestmark = pytest.mark.gpu
DIM = 256


class Proj(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(DIM, DIM, device="cuda") / DIM ** 0.5, requires_grad=False)

    def forward(self, h):
        return h @ self.w


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down, self.side = Proj(), Proj(), Proj()

    def forward(self, h):
        main = torch.cuda.current_stream()
        s = STREAM[0]
        s.wait_stream(main)
        with torch.cuda.stream(s):
            extra = self.side(h).sin()  # side-stream work, joined after the main stream's
        out = self.down(torch.nn.functional.gelu(self.up(h)))
        main.wait_stream(s)
        return h + out + extra


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.mlp = Proj(), MLP()

    def forward(self, h):
        return self.mlp(h + self.attn(h).softmax(-1))


class Model(torch.nn.Module):
    def __init__(self, layers=6):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(layers))

    def forward(self, h):
        for layer in self.layers:
            h = layer(h)
        return h


STREAM: list = []


def capture(model, x):
    """Capture ``model(x)`` instrumented with module scopes; its nodes' (kernel, annotation) in
    listing order, and whether the capture held the subscription."""
    held = []
    acquire = nodewatch.WATCH.acquire

    def spy(fns, give_up):
        token = acquire(fns, give_up)
        held.append(token is not None)
        return token

    nodewatch.WATCH.acquire = spy
    try:
        REGISTRY.clear()
        g = torch.cuda.CUDAGraph()
        with pga.instrument(modules=True, calibrate=False):
            with torch.cuda.graph(g):
                model(x)
        g.replay()
        torch.cuda.synchronize()
        rec = REGISTRY.records()[-1]
        return [(n.kernel, tuple(sorted(n.annotation.items()))) for n in rec.nodes], held
    finally:
        nodewatch.WATCH.acquire = acquire


@pytest.fixture(scope="module")
def model_and_input():
    STREAM[:] = [torch.cuda.Stream()]
    model = Model()
    x = torch.randn(64, DIM, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            model(x)
    torch.cuda.synchronize()
    return model, x


def test_callback_edges_equal_a_listing_at_every_edge(model_and_input, monkeypatch, results):
    model, x = model_and_input
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_NODE_WATCH", "0")
    with torch.no_grad():
        reference, held = capture(model, x)
    assert held == [] and reference
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_NODE_WATCH", "1")
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_VERIFY_SCOPES", "1")
    with torch.no_grad():
        verified, held = capture(model, x)  # raises (capture unannotated) if any edge's count differs
    assert held == [True], f"the subscription was refused: CUPTI result {nodewatch.WATCH.refused}"
    monkeypatch.delenv("PERFETTO_GRAPH_ANN_VERIFY_SCOPES")
    with torch.no_grad():
        fast, held = capture(model, x)
    assert held == [True]
    assert verified == reference and fast == reference
    assert all(dict(ann).get("module") for k, ann in reference if k)  # every kernel sits in a module
    scoped = sum(1 for _, ann in reference if dict(ann).get("module"))
    results["node_watch"] = {"nodes": len(reference), "scoped": scoped}


def test_giving_the_count_up_mid_capture_keeps_every_position(model_and_input, monkeypatch, results):
    """What a profiler starting mid-capture makes the captures do (nodewatch.yield_to_profiler):
    edges switch to the driver halfway through, each still checked against a listing."""
    model, x = model_and_input
    with torch.no_grad():
        reference, _ = capture(model, x)
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_VERIFY_SCOPES", "1")
    layer = model.layers[len(model.layers) // 2]
    handle = layer.register_forward_pre_hook(lambda *a: nodewatch.WATCH.yield_to_profiler())
    try:
        with torch.no_grad():
            switched, held = capture(model, x)
    finally:
        handle.remove()
    assert held == [True] and nodewatch.WATCH.users == 0
    assert switched == reference


def test_a_profiler_after_the_watch_records_and_later_captures_fall_back(model_and_input, results):
    model, x = model_and_input
    with torch.no_grad():
        reference, _ = capture(model, x)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.no_grad():
            model(x)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert kernels, "torch.profiler recorded no GPU work after the node watch ran"
    with torch.no_grad():
        after, held = capture(model, x)
    results["node_watch_after_profiler"] = {"profiled_gpu_events": len(kernels), "held": held,
                                            "refused": nodewatch.WATCH.refused}
    assert after == reference
