"""Calibration without an extra execution, on a real GPU.

``pga.graph`` must leave a program's state exactly as ``torch.cuda.graph`` does: nothing
runs at capture, and the calibration table is recorded during the graph's own first
replay outside a profiler. Expected values come from a twin captured with plain
``torch.cuda.graph`` (bitwise state), from the profiler's own trace (kernel counts), or
from the decoder's structure (kernels per scope).
"""
from __future__ import annotations

import collections
import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture.registry import REGISTRY
from perfetto_graph_ann.capture.export import chrome_trace_bytes, export

from blocks import capture, capture_set, decoder, decoder_weights, seed_block, warmup
from test_capture_gpu import calibrated_match, profile_kernels

pytestmark = pytest.mark.gpu


WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def record_of(g):
    return REGISTRY.get(g._pga_owner)


def work_match(rec, events):
    """Join the profile's GPU work events to nodes by (replay correlation, stream, ordinal among
    all work on that stream), as calibration numbers them; count those whose node has the
    event's type (and, for kernels, its grid and block)."""
    by_so = {(n.stream, n.ordinal): n for n in rec.nodes if n.stream is not None}
    want = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
    per = collections.defaultdict(list)
    for e in sorted(events, key=lambda e: e["ts"]):
        per[(e["args"]["correlation"], e["args"]["stream"])].append(e)
    ok = 0
    for (_, stream), evs in per.items():
        for k, e in enumerate(evs):
            n = by_so.get((stream, k))
            ok += n is not None and n.type == want[e["cat"]] and (
                e["cat"] != "kernel" or (list(n.grid) == e["args"]["grid"] and list(n.block) == e["args"]["block"]))
    return ok, len(events)


class StatefulStep:
    """A training step with in-place state: a step counter, Adam (capturable) and a ring
    buffer written at the counter's position. Built twice from the same seed."""

    def __init__(self):
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)).cuda()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-2, capturable=True)
        self.x = torch.randn(32, 64, device="cuda")
        self.step = torch.zeros(1, dtype=torch.int64, device="cuda")
        self.w = torch.ones(16, device="cuda")
        self.cache = torch.zeros(8, 64, device="cuda")

    def __call__(self):
        self.step.add_(1)
        self.w.mul_(0.5)
        with pga.mark_kernels("train"):
            self.model(self.x).square().mean().backward()
            self.opt.step()
        with pga.mark_kernels({"name": "cache_write", "stream": 61}):
            self.cache.index_copy_(0, (self.step - 1).remainder(8), self.model(self.x)[:1].detach())

    def state(self):
        """Every tensor the step changes, in a fixed order (copies)."""
        out = [self.step, self.w, self.cache] + [p for p in self.model.parameters()]
        for p in self.model.parameters():
            st = self.opt.state[p]
            out += [st[k] for k in sorted(st)]
        return [t.detach().clone() for t in out]

    def capture(self, annotated: bool):
        for _ in range(3):  # warm-up on a side stream, as torch's whole-network example
            self.opt.zero_grad(set_to_none=True)
            warmup(self, 1)
        self.opt.zero_grad(set_to_none=True)
        g = torch.cuda.CUDAGraph()
        with (pga.graph(g) if annotated else torch.cuda.graph(g)):
            self()
        torch.cuda.synchronize()
        return g


def bitwise_equal(a, b):
    """Same dtypes and the same bits (floats compared as bytes: -0.0 and NaNs count)."""
    def bits(t):
        return t.contiguous().view(-1).view(torch.uint8) if t.is_floating_point() else t

    return len(a) == len(b) and all(x.dtype == y.dtype and torch.equal(bits(x), bits(y)) for x, y in zip(a, b))


def test_in_place_state_matches_torch_cuda_graph_bitwise(tmp_path, results):
    ours, theirs = StatefulStep(), StatefulStep()
    g_ours = ours.capture(annotated=True)
    before = ours.state()
    g_theirs = theirs.capture(annotated=False)
    assert bitwise_equal(ours.state(), theirs.state())  # same warm-up, same state
    assert int(ours.step.item()) == 3 and float(ours.w[0].item()) == 0.5 ** 3  # capture ran nothing
    assert bitwise_equal(ours.state(), before)
    assert not record_of(g_ours).calibrated
    steps = []
    for i in range(4):
        g_ours.replay()
        g_theirs.replay()
        torch.cuda.synchronize()
        same = bitwise_equal(ours.state(), theirs.state())
        steps.append({"replay": i + 1, "bitwise_equal": same, "step": int(ours.step.item())})
        assert same, f"state differs after replay {i + 1}"
        assert int(ours.step.item()) == 4 + i
    rec = record_of(g_ours)
    assert rec.calibrated and rec.calibration_note is None  # recorded at its first replay
    assert "replay" not in vars(g_ours)  # unwrapped after calibrating
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            g_ours.replay()
        torch.cuda.synchronize()
    g_theirs.replay()
    g_theirs.replay()
    torch.cuda.synchronize()
    assert bitwise_equal(ours.state(), theirs.state())
    layout = export(prof, tmp_path / "step.pftrace")
    work = [e for e in json.loads(chrome_trace_bytes(prof))["traceEvents"] if e.get("cat") in WORK]
    ok, total = work_match(rec, work)
    results["in_place_state"] = {"replays": steps, "report": layout.report.as_dict(), "profiled_work": total,
                                 "matched_by_calibration": ok}
    print("in-place state:", results["in_place_state"])
    assert layout.report.matched["calibrated"] == ok == total > 0  # kernels, memcpys and memsets
    assert layout.report.unmatched == 0


def test_calibration_waits_for_the_first_unprofiled_replay(tmp_path, results):
    fn = seed_block()
    g, _ = capture(fn)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    rec = record_of(g)
    assert not rec.calibrated and "profiler" in rec.calibration_note and "replay" in vars(g)
    layout = export(prof, tmp_path / "profiled_only.pftrace")  # only profiled replays: structural
    report = layout.report.as_dict()
    assert layout.report.matched["calibrated"] == 0
    (joined,) = [r for r in REGISTRY.snapshot().graphs if r.exec_id == rec.exec_id]
    assert joined.calibration_note == rec.calibration_note  # what the join's report shows
    g.replay()  # the first replay outside the profiler records the table
    torch.cuda.synchronize()
    rec = record_of(g)
    assert rec.calibrated and rec.calibration_note is None and "replay" not in vars(g)
    trace = profile_kernels(g, 3)
    ok, total = calibrated_match(rec, trace)
    results["deferred_calibration"] = {"profiled_only_report": report, "note_while_profiled": True,
                                       "matched_after": [ok, total]}
    print("deferred calibration:", results["deferred_calibration"])
    assert ok == total == 3 * 14


def test_replays_in_the_profiler_warm_up_are_not_recorded_and_the_profile_is_intact(results):
    fn = seed_block()
    g, _ = capture(fn)
    steps = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=0, warmup=1, active=1, repeat=1)) as prof:
        for i in range(2):
            g.replay()
            torch.cuda.synchronize()
            steps.append(record_of(g).calibrated)
            prof.step()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    results["warm_up"] = {"calibrated_after_each_step": steps, "profiled_gpu_events": len(kernels),
                          "note": record_of(g).calibration_note}
    print("profiler warm-up:", results["warm_up"])
    assert steps == [False, False]  # warm-up (CUPTI prepared by Kineto) and active step
    assert len(kernels) >= 14  # the active step's replay is in the profile
    g.replay()
    torch.cuda.synchronize()
    assert record_of(g).calibrated


def test_decoder_batch_sizes_share_a_pool_with_nested_scopes(results):
    layers, batches = 36, [16, 4]
    weights = decoder_weights(layers)
    plain_fns = [decoder(weights, b, annotate=False) for b in batches]
    ann_fns = [decoder(weights, b) for b in batches]
    for fn in plain_fns + ann_fns:
        warmup(fn)
    plain, plain_out, _ = capture_set(plain_fns, annotated=False)
    ann, ann_out, _ = capture_set(ann_fns)
    recs = [record_of(g) for g in ann]
    assert not any(r.calibrated for r in recs)
    for _ in range(3):  # interleaved across the graphs, as a server would
        for gp, ga in zip(plain, ann):
            ga.replay()
            gp.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, p) for a, p in zip(ann_out, plain_out))
    summary = {}
    for b, g in zip(batches, ann):
        rec = record_of(g)
        assert rec.calibrated
        kern = [n for n in rec.nodes if n.type == "kernel"]
        per = collections.Counter((n.annotation.get("layer"), n.annotation.get("name")) for n in kern)
        names = {name for _, name in per}
        assert names == {"attn", "mlp"}  # every kernel is inside a layer: inner name wins
        assert sorted({layer for layer, _ in per}) == list(range(layers))
        attn, mlp = {per[(i, "attn")] for i in range(layers)}, {per[(i, "mlp")] for i in range(layers)}
        assert len(attn) == 1 and len(mlp) == 1  # every layer the same kernels
        summary[f"batch{b}"] = {"nodes": len(rec.nodes), "kernels": len(kern), "attn_per_layer": attn.pop(),
                      "mlp_per_layer": mlp.pop()}
    trace = profile_kernels(ann[0], 2, WORK)
    ok, total = work_match(record_of(ann[0]), trace)
    summary["calibration_vs_profiler"] = [ok, total]
    results["decoder"] = summary
    print("decoder:", summary)
    assert ok == total == 2 * sum(1 for n in record_of(ann[0]).nodes if n.type in ("kernel", "memcpy", "memset"))
    for g in plain + ann:
        g.reset()
