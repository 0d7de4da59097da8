"""Where annotated capture time goes, and whether node listings grow by appending (GPU probe).

Run on the GPU machine (``python3 benchmarks/gpu/probe_capture_cost.py --out FILE``); results are
written down in tests/gpu/RESULTS.md. Not a test: it measures and prints.

1. Ordering: every listing taken at a scope edge, in a capture of each workload, must be a
   prefix of the next listing of the same capture (nodes are appended in creation order).
   If that holds, a scope's nodes are ``final_listing[count_at_entry:count_at_exit]`` and
   a scope edge needs only a node count, not a listing.
2. Micro costs inside a live capture of 8 seed blocks: node count, listing, capture info,
   the node table and its per-node driver calls, a mark_kernels edge pair, cuGraphClone of
   the graph under capture (and whether a clone keeps CUPTI local ids).
3. Fixed costs of ``pga.graph`` around the unannotated block vs ``torch.cuda.graph``.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

import torch

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests")]
import perfetto_graph_ann as pga  # noqa: E402
from blocks import seed_block, two_branch, warmup  # noqa: E402
from probe_util import CountOnlyScope as CountOnly, NoopScope as Noop, per_call_us  # noqa: E402
from perfetto_graph_ann.capture import backends, collectives  # noqa: E402
from perfetto_graph_ann.capture import session as S  # noqa: E402

OUT: dict = {}
med = statistics.median




def backward_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
    x = torch.randn(64, 256, device="cuda")

    def step():
        with pga.mark_kernels("mlp", backward=True):
            y = model(x)
        with pga.mark_kernels("loss", backward=False):
            loss = y.sum()
        loss.backward()

    return step


def streams_stress():
    """Four side streams, scopes interleaved across them, events between."""
    xs = [torch.randn(256, 256, device="cuda") for _ in range(4)]
    ss = [torch.cuda.Stream() for _ in range(4)]

    def fwd():
        cur = torch.cuda.current_stream()
        for s in ss:
            s.wait_stream(cur)
        outs = []
        for rnd in range(3):
            for i, s in enumerate(ss):
                with pga.mark_stream(s, f"s{i}"):
                    with pga.mark_kernels({"name": f"r{rnd}s{i}"}):
                        xs[i].mul_(0.5)
                        outs.append(xs[i] @ xs[i])
            with pga.mark_kernels("main", backward=False):
                ev = torch.cuda.Event()
                ev.record(ss[rnd])
                cur.wait_event(ev)
                outs.append(xs[0] + 1)
        for s in ss:
            cur.wait_stream(s)
        return outs

    return fwd


def check_ordering(name: str, fn) -> None:
    listings: list = []
    orig = S.CaptureSession._list

    def rec(self):
        r = orig(self)
        if r is not None:
            listings.append(list(r))
        return r

    S.CaptureSession._list = rec
    old = os.environ.get(S.VERIFY_ENV)
    os.environ[S.VERIFY_ENV] = "1"  # list at every edge, check prefixes and the copy's table
    try:
        warmup(fn)
        g = torch.cuda.CUDAGraph()
        with pga.graph(g, calibrate=False):
            fn()
        sess = g._pga_session
        rec = sess.record  # verify mode: raises if the copy lists differently from the template
    finally:
        S.CaptureSession._list = orig
        if old is None:
            del os.environ[S.VERIFY_ENV]
        else:
            os.environ[S.VERIFY_ENV] = old
    bad = sum(1 for a, b in zip(listings, listings[1:]) if b[:len(a)] != a)
    lids = [n.local_id for n in sess.nodes]
    OUT[f"order_{name}"] = {
        "listings": len(listings), "nodes": len(lids), "not_prefix_of_next": bad,
        "copy_table_equal_template": sess._expected is not None,
        "local_ids_increasing_in_listing_order": lids == sorted(lids),
        "local_ids_are_0_to_n": sorted(lids) == list(range(len(lids))),
        "annotated_kernels": sum(1 for n in rec.nodes if n.type == "kernel" and n.annotation),
        "kernels": sum(1 for n in rec.nodes if n.type == "kernel"),
    }
    print(name, OUT[f"order_{name}"], flush=True)
    g.reset()


def micro() -> None:
    be = backends.active()
    fn = seed_block(annotate=False, layers=8)
    warmup(fn)
    g = torch.cuda.CUDAGraph()
    res: dict = {}
    with torch.cuda.graph(g):
        fn()
        stream = int(torch.cuda.current_stream().cuda_stream)
        graph = be.capture_graph(stream)
        nodes = be.list_nodes(graph)
        res["nodes"] = len(nodes)
        res["node_count_us"] = per_call_us(lambda: be.node_count(graph))
        res["list_nodes_us"] = per_call_us(lambda: be.list_nodes(graph))
        res["list_nodes_frozenset_us"] = per_call_us(lambda: frozenset(be.list_nodes(graph)))
        res["capture_graph_us"] = per_call_us(lambda: be.capture_graph(stream))
        res["node_infos_ms"] = per_call_us(lambda: be.node_infos(graph), 5) / 1e3
        cu = be._cu
        t = ctypes.c_int()
        res["per_node_get_type_us"] = per_call_us(lambda: [cu.cuGraphNodeGetType(nd, ctypes.byref(t)) for nd in nodes], 5) / len(nodes)
        p = backends.driver._KernelNodeParams()
        res["per_node_kernel_params_us"] = per_call_us(lambda: [cu.cuGraphKernelNodeGetParams_v2(nd, ctypes.byref(p)) for nd in nodes], 5) / len(nodes)
        res["per_node_local_id_us"] = per_call_us(lambda: [be.local_id(nd) for nd in nodes], 5) / len(nodes)
        # a mark_kernels edge pair on a live session (adds no node)
        sess = S.CaptureSession(be, stream, owner=object())
        sess.start()
        S.push(sess)
        try:
            def pair():
                with pga.mark_kernels("x", backward=False):
                    pass
            res["mark_kernels_pair_us"] = per_call_us(pair)
            sess.recorder.active = False  # same Python path without listings
            res["mark_kernels_pair_no_listing_us"] = per_call_us(pair)
        finally:
            S.pop(sess)
        # cuGraphClone of the graph under capture
        cu.cuGraphClone.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        clone = ctypes.c_void_p()
        t0 = time.perf_counter()
        rc = cu.cuGraphClone(ctypes.byref(clone), graph)
        res["clone_rc"] = rc
        res["clone_us"] = (time.perf_counter() - t0) * 1e6
        if rc == 0:
            cu.cuGraphNodeFindInClone.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p]
            same = 0
            cn = ctypes.c_void_p()
            for nd in nodes:
                if cu.cuGraphNodeFindInClone(ctypes.byref(cn), nd, clone) == 0 and be.local_id(cn.value) == be.local_id(nd):
                    same += 1
            res["clone_local_ids_equal"] = f"{same}/{len(nodes)}"
            res["clone_listing_local_ids_equal"] = [be.local_id(n) for n in be.list_nodes(clone.value)] == [be.local_id(n) for n in nodes]
            times = []
            for _ in range(20):
                c2 = ctypes.c_void_p()
                t0 = time.perf_counter()
                cu.cuGraphClone(ctypes.byref(c2), graph)
                times.append(time.perf_counter() - t0)
                cu.cuGraphDestroy(c2)
            res["clone_median_us"] = med(times) * 1e6
            cu.cuGraphDestroy(clone)
    g.reset()
    OUT["micro_8_blocks"] = res
    print("micro", res, flush=True)


def edge_costs() -> None:
    """Per-op cost during a live capture: a launch alone, and a launch followed by each
    candidate scope-edge query (a query right after a new node may cost more than a repeated one)."""
    import contextlib

    be = backends.active()
    y = torch.zeros(64, device="cuda")
    res: dict = {}
    n = 200
    for label in ("launch", "launch+count", "launch+list", "launch+capture_info", "launch+null_scope",
                  "launch+mark_kernels", "launch+count+count"):
        ts = []
        for _ in range(3):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                stream = int(torch.cuda.current_stream().cuda_stream)
                graph = be.capture_graph(stream)
                sess = None
                if label == "launch+mark_kernels":
                    sess = S.current()
                t0 = time.perf_counter()
                for _ in range(n):
                    if label == "launch":
                        y.add_(1)
                    elif label == "launch+count":
                        y.add_(1)
                        be.node_count(graph)
                    elif label == "launch+count+count":
                        y.add_(1)
                        be.node_count(graph)
                        be.node_count(graph)
                    elif label == "launch+list":
                        y.add_(1)
                        be.list_nodes(graph)
                    elif label == "launch+capture_info":
                        y.add_(1)
                        be.capture_graph(stream)
                    elif label == "launch+null_scope":
                        with contextlib.nullcontext():
                            y.add_(1)
                    else:
                        with pga.mark_kernels("x", backward=False):
                            y.add_(1)
                ts.append((time.perf_counter() - t0) / n)
            del sess
            g.reset()
        res[label + "_us"] = round(med(ts) * 1e6, 2)
    # mark_kernels needs a pga capture: measure it inside pga.graph
    for label in ("pga:launch", "pga:launch+mark_kernels"):
        ts = []
        for _ in range(3):
            g = torch.cuda.CUDAGraph()
            with pga.graph(g, calibrate=False):
                t0 = time.perf_counter()
                for _ in range(n):
                    if label == "pga:launch":
                        y.add_(1)
                    else:
                        with pga.mark_kernels("x", backward=False):
                            y.add_(1)
                ts.append((time.perf_counter() - t0) / n)
            g.reset()
        res[label + "_us"] = round(med(ts) * 1e6, 2)
    OUT["edge_costs"] = res
    print("edge costs", res, flush=True)


def breakdown(layers: int = 1, annotate: bool = False, n: int = 40) -> None:
    """``pga.graph``'s enter and exit, step by step (the same calls as api.graph), vs plain."""
    from perfetto_graph_ann.capture import api
    from perfetto_graph_ann.capture.registry import REGISTRY

    fn = seed_block(annotate=annotate, layers=layers)
    plain_fn = seed_block(annotate=False, layers=layers)
    warmup(fn)
    warmup(plain_fn)
    steps: dict = {}
    pc = time.perf_counter
    for _ in range(n):
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        t = [("t0", pc())]
        inner = torch.cuda.graph(g)
        t.append(("plain:ctor", pc()))
        inner.__enter__()
        t.append(("plain:enter", pc()))
        plain_fn()
        t.append(("plain:fn", pc()))
        inner.__exit__(None, None, None)
        t.append(("plain:exit", pc()))
        torch.cuda.synchronize()
        g.reset()
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        t.append(("t1", pc()))
        backends.selected_name()
        t.append(("selected_name", pc()))
        backend = backends.active()
        t.append(("active", pc()))
        inner = torch.cuda.graph(g)
        t.append(("ctor", pc()))
        inner.__enter__()
        t.append(("torch_enter", pc()))
        REGISTRY.backend = backend.name
        cs = int(torch.cuda.current_stream().cuda_stream)
        t.append(("current_stream", pc()))
        dev = torch.cuda.current_device()
        t.append(("current_device", pc()))
        owner = api._owner(g)
        t.append(("owner", pc()))
        sess = S.CaptureSession(backend, cs, REGISTRY, owner=owner, device=dev)
        t.append(("session_init", pc()))
        sess.start()
        t.append(("start", pc()))
        S.push(sess)
        t.append(("push", pc()))
        installed = collectives.install()
        t.append(("install", pc()))
        fn()
        t.append(("fn", pc()))
        sess.finish_capture()
        t.append(("finish_capture", pc()))
        S.pop(sess)
        t.append(("pop", pc()))
        if installed:
            collectives.uninstall()
        t.append(("uninstall", pc()))
        inner.__exit__(None, None, None)
        t.append(("torch_exit", pc()))
        api._attach(g, sess, False)
        t.append(("attach", pc()))
        api._bind(g)
        t.append(("bind", pc()))
        torch.cuda.synchronize()
        g.reset()
        for (_, a), (k, b) in zip(t, t[1:]):
            if k != "t1":
                steps.setdefault(k, []).append(b - a)
    res = {k: round(med(v) * 1e6, 1) for k, v in steps.items()}
    OUT[f"breakdown_us_{layers}_{'scopes' if annotate else 'no_scopes'}"] = res
    print("breakdown", layers, annotate, res, flush=True)


def scope_variants(n: int = 30) -> None:
    """Time of the captured function with the seed's scopes replaced by: nothing, a Python
    no-op context, one node count per edge only, and the real mark_kernels."""
    real = pga.mark_kernels
    be = backends.active()

    class Sync(Noop):  # a host round trip instead: does any call between launches cost this much?
        def __enter__(self):
            torch.cuda.current_stream().query()
            return self

        def __exit__(self, *a):
            torch.cuda.current_stream().query()

    for layers in (1, 8):
        plain = seed_block(annotate=False, layers=layers)
        ann = seed_block(annotate=True, layers=layers)
        warmup(plain)
        warmup(ann)
        times: dict = {}
        for _ in range(n):
            for label, fn, cls in (("none", plain, None), ("noop", ann, Noop), ("count_only", ann, CountOnly),
                                   ("capture_info_only", ann, None), ("real", ann, real)):
                if label == "capture_info_only":
                    stream = None

                    class Info(Noop):
                        def __enter__(self):
                            be.capture_graph(stream)
                            return self

                        def __exit__(self, *a):
                            be.capture_graph(stream)

                    cls = Info
                pga.mark_kernels = cls or real
                g = torch.cuda.CUDAGraph()
                torch.cuda.synchronize()
                with pga.graph(g, calibrate=False):
                    stream = int(torch.cuda.current_stream().cuda_stream)
                    t0 = time.perf_counter()
                    fn()
                    times.setdefault(label, []).append(time.perf_counter() - t0)
                pga.mark_kernels = real
                torch.cuda.synchronize()
                g.reset()
        res = {k: {"median_us": round(med(v) * 1e6, 1), "min_us": round(min(v) * 1e6, 1)} for k, v in times.items()}
        OUT[f"scope_variants_{layers}"] = res
        print("scope variants", layers, res, flush=True)


PHASES: dict = {}


def _timed(owner, name: str, label: str):
    fn = getattr(owner, name)

    def run(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            PHASES.setdefault(label, []).append(time.perf_counter() - t0)

    setattr(owner, name, run)


def plain_capture_ms(layers: int, n: int = 20) -> float:
    fn = seed_block(annotate=False, layers=layers)
    warmup(fn)
    ts = []
    for _ in range(n):
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
        g.reset()
    return med(ts) * 1e3


def fixed_costs() -> None:
    from perfetto_graph_ann.capture import api

    for owner, name, label in ((torch.cuda.graph, "__enter__", "torch_enter"), (torch.cuda.graph, "__exit__", "torch_exit"),
                               (pga.graph, "__enter__", "pga_enter"), (pga.graph, "__exit__", "pga_exit"),
                               (S.CaptureSession, "start", "start"), (S.CaptureSession, "finish_capture", "finish_capture"),
                               (api, "_attach", "attach"), (api, "_bind", "bind"), (collectives, "install", "install"),
                               (collectives, "uninstall", "uninstall")):
        _timed(owner, name, label)
    for layers in (1, 8):
        fn = seed_block(annotate=False, layers=layers)
        ann = seed_block(annotate=True, layers=layers)
        warmup(fn)
        warmup(ann)
        acc: dict = {"plain": [], "pga_no_scopes": [], "pga_scopes": []}
        phases: dict = {}
        for _ in range(20):
            for mode, ctx_fn in (("plain", fn), ("pga_no_scopes", fn), ("pga_scopes", ann)):
                g = torch.cuda.CUDAGraph()
                torch.cuda.synchronize()
                PHASES.clear()
                t0 = time.perf_counter()
                with (torch.cuda.graph(g) if mode == "plain" else pga.graph(g, calibrate=False)):
                    ctx_fn()
                torch.cuda.synchronize()
                acc[mode].append(time.perf_counter() - t0)
                for k, v in PHASES.items():
                    phases.setdefault(f"{mode}:{k}", []).append(sum(v))
                if mode == "pga_scopes":
                    g._pga_session.nodes  # the deferred table, timed apart
                    t1 = time.perf_counter()
                    rec = g._pga_session.record
                    phases.setdefault("deferred_record_build", []).append(time.perf_counter() - t1)
                    assert len(rec.nodes) == 14 * layers
                g.reset()
        res = {k: med(v) * 1e3 for k, v in acc.items()}
        res["no_scopes_overhead_pct"] = (res["pga_no_scopes"] / res["plain"] - 1) * 100
        res["scopes_overhead_pct"] = (res["pga_scopes"] / res["plain"] - 1) * 100
        res["phases_ms"] = {k: round(med(v) * 1e3, 4) for k, v in sorted(phases.items())}
        OUT[f"fixed_{layers}"] = res
        print("fixed", layers, res, flush=True)
    OUT["collectives_install_uninstall_us"] = per_call_us(lambda: (collectives.install(), collectives.uninstall()), 20)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--only", choices=["edges", "breakdown", "scopes"], help="only one part")
    args = ap.parse_args()
    if args.only:
        if args.only == "edges":
            edge_costs()
        elif args.only == "scopes":
            scope_variants()
        else:
            for layers in (1, 8):
                breakdown(layers, annotate=False)
                breakdown(layers, annotate=True)
        print(json.dumps(OUT, indent=1))
        return
    # plain captures before anything of ours touched CUDA or CUPTI, and again after
    OUT["plain_before_pga_ms"] = {1: plain_capture_ms(1), 8: plain_capture_ms(8)}
    OUT["backend"] = pga.backend_info()["backend"]
    OUT["verify_env"] = os.environ.get(S.VERIFY_ENV)
    for name, fn in (("seed_block", seed_block()), ("seed_8_blocks", seed_block(layers=8)),
                     ("two_branch", two_branch()), ("backward", backward_step()), ("streams_stress", streams_stress())):
        try:
            check_ordering(name, fn)
        except Exception as e:  # report and go on: one workload must not hide the others
            OUT[f"order_{name}"] = f"error: {type(e).__name__}: {e}"
            print(name, "error", e, flush=True)
    micro()
    edge_costs()
    scope_variants()
    for layers in (1, 8):
        breakdown(layers, annotate=False)
        breakdown(layers, annotate=True)
    fixed_costs()
    OUT["plain_after_pga_ms"] = {1: plain_capture_ms(1), 8: plain_capture_ms(8)}
    text = json.dumps(OUT, indent=1, default=str)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
