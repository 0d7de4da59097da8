"""Which graph replayed (issue 36), on a real GPU: structurally identical graphs, each with its
own scopes, replayed in a known order. The truth is the order we replayed, per thread: the
trace's ``cudaGraphLaunch`` events of a thread, in start order, are our replay calls on that
thread, and every kernel carries its launch's correlation. No part of the join's code is used
to compute the expectation.

Run with ``bash tests/gpu/run_all.sh`` (FILES=test_replay_identity_gpu) on the GPU machine.
"""
from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule

import perfetto_graph_ann as pga
from perfetto_graph_ann.annotations.files import load_annotations
from perfetto_graph_ann.capture.export import chrome_trace_bytes, export_chrome_trace_bytes
from perfetto_graph_ann.capture.recorded import recorded_annotations
from perfetto_graph_ann.capture.registry import REGISTRY
from perfetto_graph_ann.capture.replay_log import REPLAY_LOG
from perfetto_graph_ann.join import join
from perfetto_graph_ann.join.launches import kineto_tids
from perfetto_graph_ann.read.kineto import parse_trace_bytes, read_trace

pytestmark = pytest.mark.gpu

D = 256


def piece(x, w):
    """One 'piece' of a model: the same kernels for every layer (vLLM's piecewise graphs)."""
    h = torch.nn.functional.gelu(x @ w)
    return torch.softmax(h, dim=-1) + x


def capture_twin(name: str, scopes: Sequence[str], x, w):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        piece(x, w)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    with pga.graph(g, name=name):
        with pga.mark_kernels(scopes[0]):
            h = torch.nn.functional.gelu(x @ w)
        with pga.mark_kernels(scopes[1]):
            torch.softmax(h, dim=-1) + x
    return g


def truth_by_correlation(raw: bytes, calls: Dict[int, List[str]]) -> Dict[int, str]:
    """launch correlation -> the graph name we replayed there: per thread, the trace's launches
    in start order are our calls in order (``calls``: native thread id -> graph names)."""
    doc = json.loads(raw)
    launches = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("name") == "cudaGraphLaunch" and e.get("ph") == "X":
            launches[e["tid"]].append(e)
    out = {}
    for tid, evs in launches.items():
        evs.sort(key=lambda e: e["ts"])
        mine = calls.get(tid)
        assert mine is not None, f"launches on thread {tid}, which replayed nothing we know of"
        assert len(evs) == len(mine), f"thread {tid}: {len(evs)} launches in the trace, we replayed {len(mine)}"
        for e, name in zip(evs, mine):
            out[e["args"]["correlation"]] = name
    return out


def kernel_labels(trace, layout) -> Dict[int, List[Optional[str]]]:
    """launch correlation -> the annotation ``name`` of each kernel the join placed (None: unlabelled)."""
    out: Dict[int, List[Optional[str]]] = defaultdict(list)
    for e in trace.events:
        if e.is_gpu_work and e.category == "kernel":
            p = layout.placements.get(e.index)
            out[e.correlation].append(p.args.get("name") if p is not None else None)
    return out


def check(trace, layout, truth: Dict[int, str], scopes: Dict[str, Sequence[str]], exact: bool) -> Dict[str, int]:
    """Every kernel carries its own graph's label (``exact``) or none; never another graph's."""
    got = kernel_labels(trace, layout)
    counts = {"right": 0, "unlabelled": 0, "wrong": 0}
    for corr, name in truth.items():
        for label in got[corr]:
            if label is None:
                counts["unlabelled"] += 1
            elif label in scopes[name]:
                counts["right"] += 1
            else:
                counts["wrong"] += 1
    assert counts["wrong"] == 0, counts
    if exact:
        assert counts["unlabelled"] == 0, (counts, layout.report.as_dict())
    return counts


def my_tids() -> frozenset:
    """The tids Kineto may give this thread (seen on the H200: its native id where it has CPU
    ops, else pthread_self as an int32 made positive; benchmarks/gpu/probe_tids.py)."""
    return kineto_tids(threading.get_ident(), threading.get_native_id())


def native_calls(names: Sequence[str]) -> Dict[int, List[str]]:
    """This thread's calls under every tid Kineto may give it."""
    return {tid: list(names) for tid in my_tids()}


@pytest.fixture
def xw():
    torch.manual_seed(0)
    REGISTRY.clear()
    REPLAY_LOG.clear()
    return torch.randn(64, D, device="cuda"), torch.randn(D, D, device="cuda") / D ** 0.5


def test_issue_case_1_only_b_profiled_after_a_calibrated(tmp_path, results, xw):
    x, w = xw
    scopes = {"twin_A": ("A_a", "A_b"), "twin_B": ("B_a", "B_b")}
    a = capture_twin("twin_A", scopes["twin_A"], x, w)
    b = capture_twin("twin_B", scopes["twin_B"], x, w)
    a.replay()  # outside the profiler: calibrates A only
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            b.replay()
        torch.cuda.synchronize()
    raw = chrome_trace_bytes(prof)
    layout = pga.export(prof, tmp_path / "run.pftrace")
    trace = parse_trace_bytes(raw, "profile")
    truth = truth_by_correlation(raw, native_calls(["twin_B"] * 3))
    counts = check(trace, layout, truth, scopes, exact=True)
    names = sorted(r.name for r in layout.ranges if r.kind == "replay")
    results["case1"] = {"counts": counts, "replays": names, "report": layout.report.as_dict()}
    print("case1", results["case1"])
    assert names == ["twin_B #0", "twin_B #1", "twin_B #2"]


def test_issue_case_2_b_a_b_and_offline(tmp_path, results, xw):
    x, w = xw
    scopes = {"twin_A": ("A_a", "A_b"), "twin_B": ("B_a", "B_b")}
    a = capture_twin("twin_A", scopes["twin_A"], x, w)
    b = capture_twin("twin_B", scopes["twin_B"], x, w)
    a.replay()
    b.replay()
    torch.cuda.synchronize()
    stale = b.replay  # a bound method taken before profiling: torch's own replay, never logged
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for g in (b, a, b):
            g.replay()
        torch.cuda.synchronize()
    raw = chrome_trace_bytes(prof)
    (tmp_path / "run.json").write_bytes(raw)
    layout = pga.export(prof, tmp_path / "run.pftrace")
    trace = parse_trace_bytes(raw, "profile")
    truth = truth_by_correlation(raw, native_calls(["twin_B", "twin_A", "twin_B"]))
    res = {"in_process": check(trace, layout, truth, scopes, exact=True)}
    # offline: the saved JSON with the sidecar (binary and JSON forms), and through the CLI
    for form in ("sidecar.pb", "sidecar.json"):
        path = pga.save_annotations(tmp_path / form)
        t2 = read_trace(tmp_path / "run.json")
        res[form] = check(t2, join(t2, load_annotations(path)), truth, scopes, exact=True)
    cp = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "convert", str(tmp_path / "run.json"), "-a",
                         str(tmp_path / "sidecar.pb"), "-o", str(tmp_path / "cli.json")], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    cli = json.loads((tmp_path / "cli.json").read_text())
    got = defaultdict(list)
    for e in cli["traceEvents"]:
        if e.get("cat") == "kernel":
            got[e["args"]["correlation"]].append(e["args"].get("name"))
    assert all(label in scopes[truth[c]] for c, labels in got.items() for label in labels)
    # an older sidecar (no replay record): no wrong label, the ambiguity counted
    old = dataclasses.replace(recorded_annotations(), replays=None)
    layout_old = join(trace, old)
    res["old_sidecar"] = check(trace, layout_old, truth, scopes, exact=False)
    assert res["old_sidecar"]["unlabelled"] == sum(len(v) for v in kernel_labels(trace, layout_old).values())
    assert layout_old.report.unidentified_replays
    # a stale bound method replays unlogged: the count no longer fits, nothing is labelled wrong
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof2:
        for g in (b.replay, a.replay, stale):
            g()
        torch.cuda.synchronize()
    raw2 = chrome_trace_bytes(prof2)
    t3 = parse_trace_bytes(raw2, "profile 2")
    truth2 = truth_by_correlation(raw2, native_calls(["twin_B", "twin_A", "twin_B"]))
    layout_stale = pga.export(prof2, tmp_path / "stale.pftrace")
    res["stale_bound_method"] = check(t3, layout_stale, truth2, scopes, exact=False)
    res["stale_problems"] = layout_stale.report.replay_record_problems
    results["case2"] = res
    print("case2", res)


def _piecewise(x, w, n=16):
    graphs, scopes = {}, {}
    for i in range(n):
        name = f"piece {i}"
        scopes[name] = (f"layer {i} mlp", f"layer {i} softmax")
        graphs[name] = capture_twin(name, scopes[name], x, w)
    for g in graphs.values():
        g.replay()  # calibrates every piece
    torch.cuda.synchronize()
    return graphs, scopes


def test_16_piecewise_graphs_shuffled_from_two_threads(tmp_path, results, xw):
    x, w = xw
    graphs, scopes = _piecewise(x, w)
    rng = random.Random(36)
    order = {k: [rng.choice(sorted(graphs)) for _ in range(40)] for k in (0, 1)}
    calls: Dict[int, List[str]] = {}
    start = threading.Barrier(2)

    def worker(k):
        start.wait()
        calls.update({tid: order[k] for tid in my_tids()})
        for name in order[k]:  # both threads launch on the default stream, as calibrated
            graphs[name].replay()

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        ts = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        torch.cuda.synchronize()
    raw = chrome_trace_bytes(prof)
    (tmp_path / "run.json").write_bytes(raw)
    t0 = time.perf_counter()
    layout = pga.export(prof, tmp_path / "run.pftrace")
    export_s = time.perf_counter() - t0
    trace = parse_trace_bytes(raw, "profile")
    truth = truth_by_correlation(raw, calls)
    res = {"in_process": check(trace, layout, truth, scopes, exact=True), "export_s": round(export_s, 3)}
    path = pga.save_annotations(tmp_path / "sidecar.pb")
    t2 = read_trace(tmp_path / "run.json")
    res["offline"] = check(t2, join(t2, load_annotations(path)), truth, scopes, exact=True)
    old = dataclasses.replace(load_annotations(path), replays=None)
    res["old_sidecar"] = check(t2, join(t2, old), truth, scopes, exact=False)
    # how far the trace's launch times are from the calls' recorded starts (the join's slack is 50 ms)
    (window,) = [w for w in REPLAY_LOG.snapshot() if w.threads and len(w.threads) == 2][-1:]
    diffs = []
    base = trace.base_time_ns
    per_tid = defaultdict(list)
    for e in trace.events:
        if e.name == "cudaGraphLaunch" and e.ph == "X":
            per_tid[e.tid].append(base + e.ts_ns)
    for th in window.threads:
        launches = sorted(x for tid in kineto_tids(th.ident, th.native_id) for x in per_tid.get(tid, []))
        diffs += [a - s for a, s in zip(launches, th.starts_ns[th.head_uncertain:])]
    diffs.sort()
    res["launch_minus_call_start_ns"] = {"min": diffs[0], "median": diffs[len(diffs) // 2], "max": diffs[-1],
                                         "n": len(diffs)}
    results["piecewise"] = res
    print("piecewise", res)


def _scheduled(graphs, sched, n_steps: int, seed: int):
    """``n_steps`` profiler steps under ``sched``, each replaying five graphs picked at random:
    (each cycle's Chrome trace as ``on_trace_ready`` exported it, each step's graph names)."""
    rng = random.Random(seed)
    traces: List[bytes] = []
    steps: List[List[str]] = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
                 on_trace_ready=lambda p: traces.append(export_chrome_trace_bytes(p))) as prof:
        for _ in range(n_steps):
            names = [rng.choice(sorted(graphs)) for _ in range(5)]
            for name in names:
                graphs[name].replay()
            torch.cuda.synchronize()
            steps.append(names)
            prof.step()
    return traces, steps


def test_warm_up_replays_are_not_in_the_window(tmp_path, results, xw):
    x, w = xw
    graphs, scopes = _piecewise(x, w, n=4)
    traces, steps = _scheduled(graphs, schedule(wait=1, warmup=2, active=2, repeat=1), 6, seed=7)
    (raw,) = traces
    active = steps[3] + steps[4]  # wait 1, warm-up 2, active 2
    trace = parse_trace_bytes(raw, "profile")
    truth = truth_by_correlation(raw, native_calls(active))
    layout = join(trace, recorded_annotations())
    res = check(trace, layout, truth, scopes, exact=True)
    results["warmup"] = {"counts": res, "report": layout.report.as_dict()}
    print("warmup", results["warmup"])


def test_consecutive_profiler_cycles_label_their_own_twins(tmp_path, results, xw):
    """Three profiler cycles one export apart (``on_trace_ready``), each replaying the four
    piecewise twins in another order: each cycle's trace, joined with every window recorded so
    far, labels each kernel with its own graph's scope. Before session 42's fix a window ending
    within 10 ms of a trace's launches could leave that trace's replays unidentified."""
    x, w = xw
    graphs, scopes = _piecewise(x, w, n=4)
    traces, steps = _scheduled(graphs, schedule(wait=1, warmup=1, active=1, repeat=3), 9, seed=11)
    assert len(traces) == 3
    ann = recorded_annotations()
    res = {}
    for k, raw in enumerate(traces):
        trace = parse_trace_bytes(raw, f"cycle {k}")
        truth = truth_by_correlation(raw, native_calls(steps[3 * k + 2]))  # wait 1, warm-up 1, active 1
        layout = join(trace, ann)
        res[k] = {"counts": check(trace, layout, truth, scopes, exact=True),
                  "replay_graphs": layout.report.replay_graphs}
    results["cycles"] = res
    print("cycles", res)


def test_replay_cost_of_the_log(results, xw):
    """CPU time per replay with the log's wrapper in place (as while a profiler records: the
    compiled one, and the Python one where the extension is not built) and without (torch's
    own method, as always outside a profiler): rounds alternate the arms' order."""
    from perfetto_graph_ann.capture import fastpath

    x, w = xw
    g = capture_twin("cost", ("c_a", "c_b"), x, w)
    g.replay()
    torch.cuda.synchronize()
    n, rounds = 2000, 12
    arms = ["plain", "compiled", "python"] if fastpath.module_built() else ["plain", "python"]
    per = {a: [] for a in arms}
    for r in range(rounds):
        for arm in (arms if r % 2 == 0 else arms[::-1]):
            if arm != "plain":
                fastpath.ENABLED = arm == "compiled"
                REPLAY_LOG.prepared()
                fastpath.ENABLED = fastpath.module_built()
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(n):
                g.replay()
            dt = time.perf_counter_ns() - t0
            if arm != "plain":
                REPLAY_LOG.stopped(0, 0)  # no start: nothing kept
            per[arm].append(dt / n)
            torch.cuda.synchronize()
    med = {k: sorted(v)[len(v) // 2] for k, v in per.items()}
    results["replay_cost_ns"] = {"median": med, "delta": {k: med[k] - med["plain"] for k in arms if k != "plain"},
                                 "rounds": per}
    print("replay cost", results["replay_cost_ns"])
    assert not hasattr(torch.cuda.CUDAGraph.replay, "_pga_original")  # torch's own method is back
