"""The critical path of a real graph replay (issue 35, item 2).

A graph with two concurrent branches of different lengths on two streams and a join:
``fork`` (``x * 2``), then ``long`` (``LONG`` x ``sin``, on a side stream) and ``short``
(``SHORT`` x ``cos``, on the capture stream) concurrently, then ``join`` (``a + b``) after
both. Every op is one elementwise kernel, told apart by its name (``MulFunctor``,
``sin_kernel``, ``cos_kernel``, ``add``), so the truth is computed from the profile alone:
per replay (its launch's correlation), the path is the fork, the sin kernels in start order
and the add (after checking the long branch does end last), and each cos kernel's slack is
the last sin's end less the last cos's end.

Checked: the edges recorded at capture (through the sidecar, binary form: the fork precedes
both branches, the join follows both ends); the join's args on the converted trace
(``critical path`` on exactly the expected kernels, ``critical path slack ns`` on the cos
kernels); and, where a trace processor is found (not on the GPU machine: carry the files
written to ``$PGA_CP_OUT`` to a CPU machine and run ``tests/gpu/check_critical_path_sql.py``), the SQL
module's items, shares and ``edges_source``. Also times reading the edges of the captured
graph (``backend.raw_edges``, what the end of a capture does; ``decode_edges`` runs later)
against the capture.

    PGA_GPU_RESULTS=res.json PGA_CP_OUT=out/cp python3 -m pytest tests/gpu/test_critical_path_gpu.py -m gpu -s
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import perfetto_graph_ann as pga
from perfetto_graph_ann.annotations.files import load_annotations
from perfetto_graph_ann.capture.export import chrome_trace_bytes
from perfetto_graph_ann.capture.registry import REGISTRY
from perfetto_graph_ann.join import critical_path as cp
from perfetto_graph_ann.join import join
from perfetto_graph_ann.pipeline.convert import convert
from perfetto_graph_ann.read.kineto import read_trace

from blocks import warmup

pytestmark = pytest.mark.gpu
N = 1 << 24  # 64 MB of float: tens of us a kernel on an H200
LONG, SHORT = 8, 2
REPLAYS = 5


def _ns(x) -> int:
    return int((Decimal(str(x)) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


def _role(name: str) -> str:
    for key, role in (("sin_kernel", "long"), ("cos_kernel", "short"), ("MulFunctor", "fork"), ("add", "join")):
        if key in name:
            return role
    return "other"


def _program():
    x = torch.randn(N, device="cuda")
    side = torch.cuda.Stream()

    def fwd():
        with pga.mark_kernels("fork"):
            y = x * 2
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            with pga.mark_kernels("long"):
                a = y
                for _ in range(LONG):
                    a = torch.sin(a)
        with pga.mark_kernels("short"):
            b = y
            for _ in range(SHORT):
                b = torch.cos(b)
        torch.cuda.current_stream().wait_stream(side)
        with pga.mark_kernels("join"):
            return a + b

    return fwd


def _time_edges(be, raw, rounds: int = 50):
    """Microseconds of each of ``rounds`` edge reads (``backend.raw_edges``, what finish_capture
    does) and decodes (done later, on first use of the record), and the edges read."""
    times, decode, edges = [], [], None
    for _ in range(rounds):
        t = time.perf_counter()
        rec_edges = be.raw_edges(raw)
        t1 = time.perf_counter()
        edges = be.decode_edges(rec_edges)
        decode.append((time.perf_counter() - t1) * 1e6)
        times.append((t1 - t) * 1e6)
    return times, decode, edges


def test_two_branch_critical_path(tmp_path: Path, results):
    fwd = _program()
    warmup(fwd)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    t0 = time.perf_counter()
    with pga.graph(g, name="two branches"):
        fwd()
    capture_ms = (time.perf_counter() - t0) * 1e3
    g.replay()  # instantiates (keep_graph) and calibrates, outside the profiler
    torch.cuda.synchronize()

    # cost of reading the edges: the call finish_capture makes, on the kept template
    from perfetto_graph_ann.capture import backends

    be = backends.active()
    assert be is not None and hasattr(be, "edges")
    raw = g.raw_cuda_graph()
    times, decode, edges = _time_edges(be, raw)
    results["critical_path_edges_read_us_median"] = statistics.median(times)
    results["critical_path_edges_decode_us_median"] = statistics.median(decode)
    results["critical_path_capture_ms"] = capture_ms
    results["critical_path_edges_raw"] = len(edges) if edges is not None else None
    print(f"edges read: {statistics.median(times):.1f} us, decoded later: {statistics.median(decode):.1f} us "
          f"(medians of 50), {results['critical_path_edges_raw']} edges; capture {capture_ms:.1f} ms")

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(REPLAYS):
            g.replay()
        torch.cuda.synchronize()
    trace_path = tmp_path / "two_branch_cp.json"
    trace_path.write_bytes(chrome_trace_bytes(prof))
    side_path = tmp_path / "two_branch_cp.pga"
    pga.save_annotations(side_path)

    # 1. the recorded edges, through the sidecar: fork -> both branches -> join
    rec = REGISTRY.get(g._pga_owner)
    ann = load_annotations(side_path)
    graph = ann.graph(rec.exec_id)
    assert graph is not None and graph.edges, "no edges recorded"
    wp, _ = cp.work_predecessors(graph)
    by_scope = {}
    for n in graph.nodes:
        if n.type == "kernel":
            by_scope.setdefault(n.annotation.get("name"), []).append(n.local_id)
    assert {k: len(v) for k, v in by_scope.items()} == {"fork": 1, "long": LONG, "short": SHORT, "join": 1}, by_scope
    (fork,), (join_node,) = by_scope["fork"], by_scope["join"]
    assert wp[min(by_scope["long"])] == (fork,) and wp[min(by_scope["short"])] == (fork,)
    assert set(wp[join_node]) == {max(by_scope["long"]), max(by_scope["short"])}

    # 2. the truth from the profile alone
    doc = json.loads(trace_path.read_bytes(), parse_float=Decimal)
    events = doc["traceEvents"]
    launches = {e["args"]["correlation"]: _ns(e["ts"]) for e in events
                if e.get("ph") == "X" and "GraphLaunch" in e.get("name", "") and "correlation" in e.get("args", {})}
    per: dict = {}
    for i, e in enumerate(events):
        if e.get("ph") == "X" and e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in launches:
            per.setdefault(e["args"]["correlation"], []).append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), i,
                                                                 _role(e["name"])))
    assert len(per) == REPLAYS
    expected = {}
    for corr, ks in per.items():
        ks.sort()
        roles = {r: [k for k in ks if k[3] == r] for r in ("fork", "long", "short", "join", "other")}
        assert [len(roles[r]) for r in ("fork", "long", "short", "join", "other")] == [1, LONG, SHORT, 1, 0], \
            [e["name"] for e in events if e.get("args", {}).get("correlation") == corr and e.get("cat") == "kernel"]
        long_end, short_end = roles["long"][-1][1], roles["short"][-1][1]
        assert long_end > short_end, "the long branch did not end last: the test's premise"
        expected[corr] = ([roles["fork"][0]] + roles["long"] + [roles["join"][0]],
                          {k[2]: long_end - short_end for k in roles["short"]})

    # 3. the join's args
    trace = read_trace(trace_path)
    layout = join(trace, ann, graph_lanes="all")
    assert layout.report.critical_paths.get(cp.SOURCE_EDGES) == REPLAYS, layout.report.critical_paths
    for corr, (path, slack) in expected.items():
        on = {k[2] for k in path}
        for k in per[corr]:
            args = layout.placements[k[2]].args
            assert bool(args.get(cp.PATH_ARG)) == (k[2] in on), (k, args)
            if k[2] in slack:
                assert args[cp.SLACK_ARG] == slack[k[2]]
    out = tmp_path / "two_branch_cp.pftrace"
    convert(trace, out, layout=layout)
    results["critical_path_replays"] = {str(c): {"path_kernels": len(p), "short_slack_ns": next(iter(s.values()))}
                                        for c, (p, s) in expected.items()}
    keep = os.environ.get("PGA_CP_OUT")
    if keep:  # for tests/gpu/check_critical_path_sql.py on a machine with the portable engine
        os.makedirs(keep, exist_ok=True)
        for p in (trace_path, side_path, out):
            shutil.copy(p, keep)
        with open(os.path.join(keep, "expected.json"), "w") as f:
            json.dump({str(c): [[k[0], k[1]] for k in path] for c, (path, _) in expected.items()}, f)

    # 4. the SQL, where an engine is found
    from perfetto_graph_ann.errors import EngineError
    from perfetto_graph_ann.query.session import open_trace

    try:
        s = open_trace(out)
    except EngineError as e:  # no engine here (the GPU machine has none): the files are kept for the CPU side
        results["critical_path_sql"] = f"not run: {e}".splitlines()[0]
        print(results["critical_path_sql"])
        return
    with s:
        s.query("INCLUDE PERFETTO MODULE graph_ann.critical_path")
        rows = s.query("SELECT r.correlation AS corr, i.ts, i.end_ts, i.share_dur, i.wait_dur, i.edges_source "
                       "FROM graph_ann_critical_path_item AS i JOIN graph_ann_replay AS r USING (launch_id) "
                       "ORDER BY r.correlation, i.position").tuples()
    got: dict = {}
    for corr, ts, end, share, wait, src in rows:
        assert src == "edges"
        got.setdefault(corr, []).append((ts, end, share, wait))
    for corr, (path, _) in expected.items():
        items = got[corr]
        assert [(a, b) for a, b, _, _ in items] == [(k[0], k[1]) for k in path]
        for (ts, end, share, wait), prev in zip(items[1:], items):
            assert share == end - max(ts, prev[1]) and wait == max(0, ts - prev[1])
    results["critical_path_sql"] = "checked"


def test_edge_read_cost_on_the_decoder(results):
    """What reading the edges adds to a capture, on the 36-layer decoder (~900 nodes): the
    ``backend.raw_edges`` call finish_capture makes (and the later decoding), timed on the kept
    template, against the whole annotated capture (warm-up included). Records numbers;
    asserts only that the record's edges are those the driver lists and that the graph has
    a root."""
    from blocks import capture, decoder, decoder_weights
    from perfetto_graph_ann.capture import backends

    fn = decoder(decoder_weights())
    t0 = time.perf_counter()
    g, _ = capture(fn, keep_graph=True, calibrate=False)
    capture_ms = (time.perf_counter() - t0) * 1e3
    g.replay()
    torch.cuda.synchronize()
    be = backends.active()
    raw = g.raw_cuda_graph()
    times, decode, edges = _time_edges(be, raw)
    results["decoder_edges_decode_us_median"] = statistics.median(decode)
    rec = REGISTRY.get(g._pga_owner)
    assert rec.edges is not None and 0 < len(rec.edges) <= len(edges)  # markers (no edges expected) left out
    wp, _ = cp.work_predecessors(rec)
    roots = [k for k, ps in wp.items() if not ps]
    results["decoder_nodes"] = len(rec.nodes)
    results["decoder_edges"] = len(edges)
    results["decoder_edges_read_us_median"] = statistics.median(times)
    results["decoder_capture_ms_with_warmup"] = capture_ms
    print(f"decoder: {len(rec.nodes)} nodes, {len(edges)} edges, edges read {statistics.median(times):.1f} us, "
          f"decoded later {statistics.median(decode):.1f} us (medians of 50); capture incl. warmup "
          f"{capture_ms:.1f} ms; {len(roots)} root kernels")
    assert len(roots) >= 1
