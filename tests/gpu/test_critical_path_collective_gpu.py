"""The critical path of a replay with a collective overlapped with compute (issue 35, item 2,
the second GPU case), on one GPU: a single-rank NCCL process group.

A toy decoder of ``LAYERS`` layers: per layer, ``compute`` (``K`` elementwise kernels on the
capture stream), then on a side stream (told apart by scope: a replay runs a graph's branches
on streams the driver picks) ``allreduce`` (a copy of the layer's output, one
elementwise kernel, and ``dist.all_reduce`` of that copy), overlapped with the next layer's
compute; at the end the capture stream waits for the side stream and ``join`` adds the last
copy to the output. The truth is computed from the profile alone with the dependencies the
program makes by construction (not the recorded edges): each stream's work in order; the
first item of layer i's allreduce after layer i's last compute kernel; ``join`` after the last
compute kernel and the last allreduce item. From the item that ends last, step to the
predecessor that ended last: the path; each scope's share of it, ``end - max(start,
release)``. Compared with the join's ``critical path`` args and with the shares they give.

    PGA_GPU_RESULTS=res.json python3 -m pytest tests/gpu/test_critical_path_collective_gpu.py -m gpu -s
"""
from __future__ import annotations

import json
import os
import socket
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture.export import chrome_trace_bytes
from perfetto_graph_ann.join import critical_path as cp
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace

pytestmark = pytest.mark.gpu
N = 1 << 22
LAYERS, K = 4, 3
REPLAYS = 3


def _ns(x) -> int:
    return int((Decimal(str(x)) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("torch.distributed with NCCL is not available")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    yield dist
    dist.destroy_process_group()


def _program(dist, collective: str):
    x = torch.randn(N, device="cuda")
    side = torch.cuda.Stream()
    gathered = torch.empty(N, device="cuda")

    def fwd():
        h, c = x, None
        for _ in range(LAYERS):
            with pga.mark_kernels("compute"):
                for _ in range(K):
                    h = torch.sin(h)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                with pga.mark_kernels("allreduce"):
                    c = h * 1.0
                    if collective == "all_reduce":
                        dist.all_reduce(c)  # in place: with one rank NCCL may launch nothing
                    else:
                        dist.all_gather_into_tensor(gathered, c)  # out of place: a copy at least
                        c = gathered
        torch.cuda.current_stream().wait_stream(side)
        with pga.mark_kernels("join"):
            return h + c

    return fwd


def _truth(items_main, items_side):
    """Path (event indices) and per-scope shares from the construction's dependencies."""
    preds = {}
    main = items_main
    for j, it in enumerate(main):
        preds[it[2]] = [main[j - 1][2]] if j else []
    per_layer_side = len(items_side) // LAYERS
    assert per_layer_side * LAYERS == len(items_side) and per_layer_side >= 1, len(items_side)
    for j, it in enumerate(items_side):
        ps = [items_side[j - 1][2]] if j else []
        if j % per_layer_side == 0:  # the layer's first allreduce item waits for its compute
            layer = j // per_layer_side
            ps.append(main[(layer + 1) * K - 1][2])
        preds[it[2]] = ps
    join_item = main[-1]
    preds[join_item[2]] = [main[-2][2], items_side[-1][2]]
    by = {it[2]: it for it in main + items_side}
    last = max(by.values(), key=lambda it: (it[1], -it[0]))
    path = [last]
    while True:
        # a predecessor gates only when it ends no later than its dependent (as the module's rule)
        gating = [by[p] for p in preds[path[-1][2]] if by[p][1] <= path[-1][1]]
        if not gating:
            break
        path.append(max(gating, key=lambda it: (it[1], -it[0])))
    path.reverse()
    shares = {}
    for prev, it in zip([None] + path[:-1], path):
        release = prev[1] if prev is not None else it[0]
        shares[it[3]] = shares.get(it[3], 0) + it[1] - max(it[0], release)
    return path, shares


@pytest.mark.parametrize("collective", ["all_reduce", "all_gather"])
def test_collective_overlapped_with_compute(tmp_path: Path, group, results, collective):
    fwd = _program(group, collective)
    for _ in range(3):
        fwd()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with pga.graph(g, name="decoder with allreduce"):
        fwd()
    g.replay()  # calibrates, outside the profiler
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(REPLAYS):
            g.replay()
        torch.cuda.synchronize()
    trace_path = tmp_path / "collective_cp.json"
    trace_path.write_bytes(chrome_trace_bytes(prof))

    doc = json.loads(trace_path.read_bytes(), parse_float=Decimal)
    events = doc["traceEvents"]
    launches = {e["args"]["correlation"] for e in events
                if e.get("ph") == "X" and "GraphLaunch" in e.get("name", "") and "correlation" in e.get("args", {})}
    trace = read_trace(trace_path)
    layout = join(trace, _annotations(), graph_lanes="none")
    from perfetto_graph_ann.join.summary import summary_lines

    print(collective, "\n".join(summary_lines(layout.report)))  # what the join saw, should the next line fail
    assert layout.report.critical_paths.get(cp.SOURCE_EDGES) == REPLAYS, layout.report.critical_paths
    per: dict = {}
    for i, e in enumerate(events):
        if (e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                and e.get("args", {}).get("correlation") in launches):
            scope = layout.placements[i].args.get("name") if i in layout.placements else None
            per.setdefault(e["args"]["correlation"], []).append(
                (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), i, scope, e["args"].get("stream")))
    assert len(per) == REPLAYS
    got_rows = {}
    for corr, ks in per.items():
        ks.sort()
        # by scope, not by stream: a replay runs the graph's branches on streams the driver picks
        main = [k for k in ks if k[3] in ("compute", "join")]
        # the side branch: the copy (scope "allreduce") and NCCL's work (its collective's own name)
        side = [k[:3] + ("allreduce", k[4]) for k in ks if k[3] not in ("compute", "join")]
        assert [k[3] for k in main] == ["compute"] * (LAYERS * K) + ["join"], [k[3] for k in main]
        assert side, [(k[3], k[4]) for k in ks]
        path, shares = _truth(main, side)
        on = {k[2] for k in ks if layout.placements[k[2]].args.get(cp.PATH_ARG)}
        assert on == {k[2] for k in path}, (sorted(on), [k[2] for k in path])
        ours = sorted((k for k in main + side if k[2] in on), key=lambda k: k[0])
        got = {}
        for prev, it in zip([None] + ours[:-1], ours):
            release = prev[1] if prev is not None else it[0]
            got[it[3]] = got.get(it[3], 0) + it[1] - max(it[0], release)
        assert got == shares
        got_rows[str(corr)] = {"path_items": len(path), "shares_ns": shares,
                               "side_items_per_layer": len(side) // LAYERS}
    results[f"critical_path_{collective}"] = got_rows
    print(f"critical path with {collective}:", json.dumps(got_rows))


def _annotations():
    from perfetto_graph_ann.capture.registry import REGISTRY

    return REGISTRY.snapshot()
