"""Can a capture do without CUPTI on driver 13.0? (probe, issue 31's capture limit)

CUPTI, once initialised, taxes every capture (~1.065x, BENCHMARKS.md session 38), and the cupti
backend initialises it for the node ids. This probe asks what a capture that never initialises
CUPTI would need, in one fresh process:

A. CUPTI never initialised (checked: a 64-kernel graph's replay costs ~3 us of host time then,
   ~15-29 us once CUPTI is initialised, BENCHMARKS.md session 17):
   - capture cost of the 36-layer toy decoder (``module_capture.toy``) with a global module
     pre/post hook, registered for the whole run, that at every edge adds an empty node to the
     graph under capture (``marker``: a scope edge that reads no count) or counts the graph's
     nodes (``count``), against the same hooks returning at once (``none``; ``noop`` differs
     from it only in a flag read, so it measures nothing more: the hooks' own dispatch is in
     every arm); arms alternate each round, outputs compared;
   - a kept graph (the decoder, markers at every module edge, a side-stream branch, a device
     copy) and a plain kept graph of the same code: their node listings, types and kernel
     names, read without CUPTI.
B. CUPTI initialised by asking the first node's id:
   - is ``cuptiGetGraphNodeId(node) & 0xffffffff`` the node's position in the listing, and its
     high half ``cuptiGetGraphId`` of the template, for graphs captured before CUPTI existed?
   - does ``cuptiGetGraphExecId`` answer for an executable graph instantiated before?
   - does one replay's activity (the calibration's session) carry ``(exec id << 32) | position``
     for every kernel, copy and memset node, with matching node types?
   - the same checks on a graph captured after CUPTI was initialised (control);
   - the capture arms of A again, CUPTI initialised (its tax on each).

    python benchmarks/gpu/probe_cupti_free.py [--rounds 30] [--out FILE]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", ".."), os.path.join(HERE, "..", "..", "tests", "gpu")]

import torch  # noqa: E402

from module_capture import toy  # noqa: E402
from perfetto_graph_ann.capture import backends  # noqa: E402
from perfetto_graph_ann.capture.calibration import activity_session  # noqa: E402

ARMS = ("none", "noop", "marker", "count")


def replay_host_us(g: torch.cuda.CUDAGraph, n: int = 300) -> float:
    """Median host time of one ``replay()`` call (5 blocks of ``n``, the GPU idle before each), in us."""
    def block() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            g.replay()
        dt = time.perf_counter() - t0
        torch.cuda.synchronize()
        return dt / n * 1e6

    return round(statistics.median(block() for _ in range(5)), 2)


class Hooks:
    """Global module hooks whose work at every edge is set by ``mode``."""

    def __init__(self, be) -> None:
        self.be, self.cu = be, be._cu
        self.mode, self.graph, self.markers = "none", None, []
        self._nd, self._n = ctypes.c_void_p(), ctypes.c_size_t()
        mm = torch.nn.modules.module
        self._h = (mm.register_module_forward_pre_hook(self._pre), mm.register_module_forward_hook(self._post))

    def _edge(self) -> None:
        if self.graph is None:
            return
        if self.mode == "marker":
            if self.cu.cuGraphAddEmptyNode(ctypes.byref(self._nd), self.graph, None, 0) != 0:
                raise RuntimeError("cuGraphAddEmptyNode failed")
            self.markers.append(self._nd.value)
        elif self.mode == "count":
            self.cu.cuGraphGetNodes(self.graph, None, ctypes.byref(self._n))

    def _pre(self, m, a):
        self._edge()

    def _post(self, m, a, out):
        self._edge()

    def remove(self) -> None:
        for h in self._h:
            h.remove()


def capture(model, x, hooks: Hooks, mode: str, pool, keep: bool = False, extra=None):
    """One capture of ``model(x)`` (and ``extra(out)``) with the hooks in ``mode``: (ms, graph, out)."""
    g = torch.cuda.CUDAGraph(keep_graph=keep)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.cuda.graph(g, pool=pool):
        hooks.mode, hooks.markers = mode, []
        hooks.graph = hooks.be.capture_graph(int(torch.cuda.current_stream().cuda_stream)) if mode != "none" else None
        out = model(x)
        if extra is not None:
            out = extra(out)
        hooks.graph = None
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3, g, out


def timing(model, x, hooks: Hooks, rounds: int) -> dict:
    """Arms alternating each round, a settle capture before each; median ratio to ``none``."""
    pool = None  # a pool each: graphs of a shared one freed between captures trip torch 2.11's allocator
    ms = {a: [] for a in ARMS}
    ref = None
    for r in range(rounds):
        order = ARMS[r % len(ARMS):] + ARMS[:r % len(ARMS)]
        for arm in order:
            capture(model, x, hooks, "none", pool)  # settle (untimed)
            t, g, out = capture(model, x, hooks, arm, pool)
            g.replay()
            torch.cuda.synchronize()
            o = out.float().cpu()
            if ref is None:
                ref = o
            elif not torch.equal(ref, o):
                raise SystemExit(f"arm {arm}: output differs from the first capture's")
            ms[arm].append(t)
            del g, out
    plain = ms["none"]
    return {a: {"median_ms": round(statistics.median(v), 3),
                "ratio": round(statistics.median([v[i] / plain[i] for i in range(rounds)]), 4)} for a, v in ms.items()}


def listing(be, graph: int) -> list:
    """[(handle, type, kernel name)] of ``graph``'s nodes in listing order, no CUPTI call."""
    saved = be.local_id
    be.local_id = lambda nd: -1
    try:
        return [(n.handle, n.type, n.kernel) for n in be.node_infos(graph)]
    finally:
        be.local_id = saved


def ids_check(be, rows: list, template: int) -> dict:
    """CUPTI's ids of listed nodes against their positions."""
    ids = [be._node_id(h) for h, _, _ in rows]
    gid = be.graph_id(template)
    bad = [i for i, v in enumerate(ids) if (v & 0xFFFFFFFF) != i]
    highs = sorted({v >> 32 for v in ids})
    return {"nodes": len(ids), "positions_differ": len(bad),
            "first_differing": [(i, ids[i] & 0xFFFFFFFF) for i in bad[:5]],
            "high_halves": highs[:4], "template_graph_id": gid}


def activity_check(be, g: torch.cuda.CUDAGraph, rows: list) -> dict:
    """One replay's activity: every record keyed (exec id << 32) | position of a node of its type."""
    try:
        eid = be.exec_id(int(g.raw_cuda_graph_exec()))
    except Exception as e:  # noqa: BLE001 (a probe: report whatever it is)
        return {"exec_id_error": repr(e)}
    collected = []
    with activity_session(collected, eid, getattr(be, "libcupti", None)):
        g.replay()
        torch.cuda.synchronize()
    want = {"kernel": "kernel", "memcpy": "memcpy", "memset": "memset"}
    expected = sorted(i for i, (_, t, _) in enumerate(rows) if t in want)
    got = sorted((r.graph_node_id & 0xFFFFFFFF) for r in collected)
    wrong_type = [(r.graph_node_id & 0xFFFFFFFF, r.kind) for r in collected
                  if (r.graph_node_id & 0xFFFFFFFF) >= len(rows) or rows[r.graph_node_id & 0xFFFFFFFF][1] != r.kind]
    return {"exec_id": eid, "records": len(collected),
            "other_exec": sum(1 for r in collected if r.graph_node_id >> 32 != eid),
            "record_positions_equal_node_positions": got == expected, "expected_records": len(expected),
            "wrong_type": wrong_type[:5], "kinds": sorted({r.kind for r in collected})}


def small_graph():
    x = torch.zeros(64, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(64):
            x.add_(1)
    return g


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--out")
    args = ap.parse_args()
    out: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    torch.zeros(1, device="cuda")
    be = backends.active()
    out["backend"] = be.name
    be._cu.cuGraphAddEmptyNode.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_size_t]
    gs = small_graph()
    out["A_replay_host_us"] = replay_host_us(gs)
    model, x, calls = toy(36, 16)
    out["module_calls"] = calls
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        hooks = Hooks(be)
        out["A_timing"] = timing(model, x, hooks, args.rounds)
        print("A timing", out["A_timing"], flush=True)
        side = torch.cuda.Stream()
        buf = torch.empty(16, 128, 1024, device="cuda", dtype=torch.bfloat16)

        def extra(o):
            s = torch.cuda.current_stream()
            side.wait_stream(s)
            with torch.cuda.stream(side):
                y = o * 2
                y.zero_()
            s.wait_stream(side)
            buf.copy_(o)
            return o + y

        pool = torch.cuda.graph_pool_handle()
        graphs = {}
        for name, mode in (("kept_markers", "marker"), ("kept_plain", "none")):
            _, g, o = capture(model, x, hooks, mode, pool, keep=True, extra=extra)
            markers = list(hooks.markers)
            g.instantiate()
            g.replay()
            torch.cuda.synchronize()
            rows = listing(be, int(g.raw_cuda_graph()))
            pos = {h: i for i, (h, _, _) in enumerate(rows)}
            graphs[name] = (g, rows, o.float().cpu())
            out[f"A_{name}"] = {"nodes": len(rows), "types": {t: sum(1 for r in rows if r[1] == t) for t in
                                                              sorted({r[1] for r in rows})},
                                "markers": len(markers), "markers_listed_as_empty":
                                    sum(1 for m in markers if m in pos and rows[pos[m]][1] == "empty")}
        out["A_markers_same_output"] = bool(torch.equal(graphs["kept_markers"][2], graphs["kept_plain"][2]))
        km, kp = graphs["kept_markers"][1], graphs["kept_plain"][1]
        out["A_same_kernels_in_order"] = [r[2] for r in km if r[1] != "empty"] == [r[2] for r in kp]
        out["A_replay_host_us_after"] = replay_host_us(gs)
        print("A", {k: v for k, v in out.items() if k.startswith("A_") and k != "A_timing"}, flush=True)
        # B: CUPTI initialised by the first id asked
        t0 = time.perf_counter()
        be._node_id(km[0][0])
        out["B_first_id_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
        out["B_replay_host_us"] = replay_host_us(gs)
        for name, (g, rows, _) in graphs.items():
            out[f"B_{name}_ids"] = ids_check(be, rows, int(g.raw_cuda_graph()))
            out[f"B_{name}_activity"] = activity_check(be, g, rows)
        _, gc_, _ = capture(model, x, hooks, "marker", pool, keep=True, extra=extra)
        gc_.instantiate()
        gc_.replay()
        torch.cuda.synchronize()
        rows = listing(be, int(gc_.raw_cuda_graph()))
        out["B_control_ids"] = ids_check(be, rows, int(gc_.raw_cuda_graph()))
        out["B_control_activity"] = activity_check(be, gc_, rows)
        print("B", {k: v for k, v in out.items() if k.startswith("B_")}, flush=True)
        out["B_timing"] = timing(model, x, hooks, args.rounds)
        print("B timing", out["B_timing"], flush=True)
        hooks.remove()
    print(json.dumps(out))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
