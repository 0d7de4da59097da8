"""Does a graph's device-to-device copy replay as a copy or as a kernel, by CUPTI's state? (probe)

probe_cupti_free.py found the copy node of graphs captured and instantiated before CUPTI was
initialised recorded as a *kernel* by a later activity session, while a graph captured after the
initialisation recorded it as a memcpy. The join matches a replay by node types (a memcpy node
wants a ``gpu_memcpy`` event), and CUPTI is detached after captures (1 s on driver 13.0), so
which state decides matters. One fresh process, each graph ``x * 2; buf.copy_(y); buf.zero_();
buf + 1`` kept (``keep_graph=True``) and instantiated explicitly:

- ``never``: captured and instantiated before CUPTI was ever initialised;
- ``init_before_instantiate``: captured with CUPTI not initialised, instantiated after;
- ``attached``: captured and instantiated with CUPTI initialised;
- ``init_mid_capture``: CUPTI detached at the capture's start, initialised after the copy;
- ``detached_before_instantiate``: captured with CUPTI initialised, detached, then instantiated.

Then, CUPTI initialised: each graph's replay under an activity session (the kind recorded at
its copy node's position), and under torch.profiler (the categories of its GPU events).

``--warm-copy``: instead, one graph captured by ``torch.cuda.graph`` (kept, as above), CUPTI never
initialised, after an eager copy between the same tensors (``warm``) or with none before it in
the process (``cold``, the default): whether an eager copy first decides the copy's kind.

    python benchmarks/gpu/probe_memcpy_kinds.py [--warm-copy {cold,warm}] [--out FILE]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..")]

import torch  # noqa: E402

from probe_util import CuptiSwitch  # noqa: E402
from perfetto_graph_ann.capture import backends  # noqa: E402
from perfetto_graph_ann.capture.calibration import activity_session  # noqa: E402


def _all_states(capture, graphs, sw, out) -> None:
    """The five graphs of the module's docstring, in order."""
    capture("never").instantiate()
    capture("init_before_instantiate")
    out["init_rc"] = sw.init()
    graphs["init_before_instantiate"][0].instantiate()
    capture("attached").instantiate()
    out["detach_rc_1"] = sw.detach()
    capture("init_mid_capture", mid=lambda: out.__setitem__("init_mid_rc", sw.init()))
    graphs["init_mid_capture"][0].instantiate()
    capture("detached_before_instantiate")
    out["detach_rc_2"] = sw.detach()
    graphs["detached_before_instantiate"][0].instantiate()
    out["init_rc_2"] = sw.init()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--warm-copy", choices=("cold", "warm"))
    args = ap.parse_args()
    torch.zeros(1, device="cuda")
    be = backends.active()
    sw = CuptiSwitch()
    x = torch.randn(1024, 1024, device="cuda")
    buf = torch.empty_like(x)
    graphs = {}

    def capture(name, mid=None):
        g = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(g):
            y = x * 2
            buf.copy_(y)
            if mid is not None:
                mid()
            buf.zero_()
            z = buf + 1
        graphs[name] = [g, z]
        return g

    out: dict = {}
    if args.warm_copy:
        if args.warm_copy == "warm":
            buf.copy_(x * 2)
            torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(g):
            y = x * 2
            buf.copy_(y)
            buf.zero_()
            z = buf + 1
        g.instantiate()
        graphs[args.warm_copy] = [g, z]
    else:
        _all_states(capture, graphs, sw, out)
    for g, _ in graphs.values():
        g.replay()
    torch.cuda.synchronize()
    if args.warm_copy:
        out["init_rc"] = sw.init()
    for name, (g, z) in graphs.items():
        rows = be.node_infos(int(g.raw_cuda_graph()))
        eid = be.exec_id(int(g.raw_cuda_graph_exec()))
        collected = []
        with activity_session(collected, eid, getattr(be, "libcupti", None)):
            g.replay()
            torch.cuda.synchronize()
        by_pos = {r.graph_node_id & 0xFFFFFFFF: r.kind for r in collected}
        out[name] = {"nodes": [(i, n.type, n.kernel and n.kernel[:40]) for i, n in enumerate(rows)],
                     "recorded": [by_pos.get(i) for i in range(len(rows))],
                     "output_ok": bool(torch.equal(z, x * 2 * 0 + 1))}
    prof_out = {}
    with tempfile.TemporaryDirectory() as d:
        for name, (g, _) in graphs.items():
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                    torch.profiler.ProfilerActivity.CUDA]) as prof:
                g.replay()
                torch.cuda.synchronize()
            p = os.path.join(d, name + ".json")
            prof.export_chrome_trace(p)
            with open(p) as f:
                ev = json.load(f)["traceEvents"]
            gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
            prof_out[name] = {"cats": dict(collections.Counter(e["cat"] for e in gpu)),
                              "names": sorted({e["name"][:60] for e in gpu})}
    out["profiler"] = prof_out
    for k, v in out.items():
        print(k, v, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
