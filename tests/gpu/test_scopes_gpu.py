"""Named graphs and scope ranges on a real GPU (issue 21).

A small decoder with nested scopes (``{"name": "layer", "layer": i}`` around ``attn`` and
``mlp``) is captured at two batch sizes sharing one memory pool, named ``decode bs=1`` /
``decode bs=4``, and replayed interleaved under torch.profiler; ``export`` writes the
.pftrace. Expected ranges are computed from the profile's own Chrome trace and each
graph's calibration (kernel -> node by replay correlation, stream and ordinal) and the
nodes' merged annotations (the ``layer`` field and the inner ``name``), not from the
projection's scope table.
"""
from __future__ import annotations

import collections
import json
import os
import sys
from decimal import ROUND_HALF_EVEN, Decimal

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture.registry import REGISTRY
from perfetto_graph_ann.capture.export import chrome_trace_bytes, export

from blocks import warmup

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support.pftrace_decode import decode, projected_slices  # noqa: E402  (tests/support/pftrace_decode.py)

pytestmark = pytest.mark.gpu
LAYERS = 4
DIM = 512


def _ns(x) -> int:
    return int((Decimal(str(x)) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


def decoder(bs: int, weights):
    x = torch.randn(bs * 16, DIM, device="cuda")

    def fwd():
        h = x
        for i, (wq, wk, wv, w1, w2) in enumerate(weights):
            with pga.mark_kernels({"name": "layer", "layer": i}):
                with pga.mark_kernels("attn"):
                    s = torch.softmax((h @ wq) @ (h @ wk).T, dim=-1)
                    h = h + s @ (h @ wv)
                with pga.mark_kernels("mlp"):
                    h = h + torch.nn.functional.gelu(h @ w1) @ w2
        return h

    return fwd


def test_named_decoder_replays_and_layer_scopes(tmp_path, results):
    weights = [tuple(torch.randn(DIM, DIM, device="cuda") / DIM ** 0.5 for _ in range(5)) for _ in range(LAYERS)]
    graphs = {}
    pool = None
    for bs in (1, 4):
        fn = decoder(bs, weights)
        warmup(fn)
        g = torch.cuda.CUDAGraph()
        with pga.graph(g, pool=pool, name=f"decode bs={bs}"):
            fn()
        pool = g.pool() if pool is None else pool
        graphs[bs] = g
    for g in graphs.values():  # one replay outside the profiler: calibration, wherever it happens
        g.replay()
    torch.cuda.synchronize()
    order = [1, 4, 1, 4, 1, 4]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for bs in order:
            graphs[bs].replay()
        torch.cuda.synchronize()
    layout = export(prof, tmp_path / "run.pftrace")
    recs = {bs: REGISTRY.get(g._pga_owner) for bs, g in graphs.items()}
    assert all(r.name == f"decode bs={bs}" for bs, r in recs.items())

    # expected: kernel -> (graph, node) by (correlation, stream, ordinal) per graph's calibration
    doc = json.loads(chrome_trace_bytes(prof))
    events = doc["traceEvents"]
    launches = sorted((e["ts"], e["args"]["correlation"]) for e in events if e.get("name") == "cudaGraphLaunch")
    launch_bs = {corr: order[i] for i, (_, corr) in enumerate(launches)}
    replay_of = {}
    for bs in (1, 4):
        corrs = [c for _, c in launches if launch_bs[c] == bs]
        replay_of.update({c: k for k, c in enumerate(corrs)})
    per = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and \
                e["args"].get("correlation") in launch_bs:
            per[(e["args"]["correlation"], e["args"]["stream"])].append(e)
    replays = collections.defaultdict(list)
    scopes = collections.defaultdict(list)
    for (corr, stream), evs in per.items():
        bs = launch_bs[corr]
        by_so = {(n.stream, n.ordinal): n for n in recs[bs].nodes if n.stream is not None}
        for k, e in enumerate(sorted(evs, key=lambda e: Decimal(str(e["ts"])))):
            node = by_so[(stream, k)]
            iv = (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
            key = (f"decode bs={bs}", replay_of[corr])
            replays[key].append(iv)
            layer = node.annotation.get("layer")
            if layer is not None:
                scopes[key + (f"layer {layer}",)].append(iv)
                scopes[key + (f"layer {layer} / {node.annotation['name']}",)].append(iv)

    def span(ivs):
        return min(a for a, _ in ivs), max(b for _, b in ivs), len(ivs)

    d = decode(tmp_path / "run.pftrace")
    got_r = {}
    for s in d.slices:
        if s.cat == "graph_replay":
            name, _, idx = s.name.rpartition(" #")
            got_r[(name, int(idx))] = (s.ts, s.ts + s.dur, s.args["kernel count"])
    name_of = {r.exec_id: f"decode bs={bs}" for bs, r in recs.items()}
    got_s = {(name_of[s.args["graph id"]], s.args["replay"], s.args.get("scope path", s.name)):
             (s.ts, s.ts + s.dur, s.args["kernel count"]) for s in projected_slices(d, "gpu_scope")}
    exp_r = {k: span(v) for k, v in replays.items()}
    exp_s = {k: span(v) for k, v in scopes.items()}
    names_in_time = [n for n, _ in sorted(got_r.items(), key=lambda kv: kv[1][0])]
    results["scopes_gpu"] = {
        "report": layout.report.as_dict(), "replays": len(got_r), "scope_slices": len(got_s),
        "replay_names_in_time_order": [f"{n} #{i}" for n, i in names_in_time],
        "kernels_per_replay": {f"{k[0]} #{k[1]}": v[2] for k, v in exp_r.items()},
        "layer_spans_ns_bs4_replay0": {k[2]: v[1] - v[0] for k, v in exp_s.items() if k[:2] == ("decode bs=4", 0)},
        "match": {"replays": got_r == exp_r, "scopes": got_s == exp_s},
    }
    print(results["scopes_gpu"])
    assert layout.report.unmatched == 0
    assert [n for n, _ in names_in_time] == [f"decode bs={bs}" for bs in order]
    assert got_r == exp_r
    assert len(got_s) == 3 * LAYERS * len(order)
    assert got_s == exp_s
