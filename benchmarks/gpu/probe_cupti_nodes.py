"""Can a CUPTI resource callback position scope edges? (GPU machine, issue 31's capture cost.)

A scope edge today asks the driver where the capture is (a node count, or an empty marker node
past 512 nodes). CUPTI's resource callback ``GRAPHNODE_CREATED`` fires for every node a graph
gets, so a counter it bumps in C would give that position with no driver call. This probe checks,
in one fresh process, what that idea depends on:

1. ``cuptiSubscribe`` succeeds in a process where no profiler ran yet (libcupti as torch loaded it);
2. the callback fires for stream-captured nodes, main and side streams, in the order
   ``cuGraphGetNodes`` lists them (compared during the capture at several points, and at its end);
3. its cost on a plain capture of the 36-layer decoder, and on an eager forward (enabled vs
   disabled, alternating);
4. after ``cuptiUnsubscribe``, a torch.profiler run still records kernels; while subscribed
   (``--profile-while-subscribed``) whether it does;
5. once torch's profiler ran, whether a new subscription is refused (and with which code).

Prints JSON lines. Not a test.

    python benchmarks/gpu/probe_cupti_nodes.py [--profile-while-subscribed]
"""
from __future__ import annotations

import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "tests", "gpu")]
from module_capture import Decoder, capture_once, decoder_weights, warmup  # noqa: E402

from perfetto_graph_ann.capture import backends  # noqa: E402
from perfetto_graph_ann.capture.libcupti import find_libcupti  # noqa: E402

C_SRC = r"""
#include <stdint.h>
#include <stdatomic.h>
typedef int (*sub_fn)(void **, void *, void *);
typedef int (*en_fn)(uint32_t, void *, int, int);
typedef int (*unsub_fn)(void *);
#define CAP (1 << 16)
static void *sub = 0;
static int want = -1;
static _Atomic long long nn = 0;
static void *nodes[CAP];
static void *graphs[CAP];
static void cb(void *ud, int domain, int cbid, const void *data) {
    (void)ud; (void)domain;
    if (cbid != want || data == 0) return;
    void *const *rd = (void *const *)data;       /* context, stream, resourceDescriptor */
    void *const *gd = (void *const *)rd[2];      /* graph, originalGraph, node, originalNode, ... */
    if (gd == 0) return;
    long long i = atomic_fetch_add(&nn, 1);
    if (i < CAP) { nodes[i] = gd[2]; graphs[i] = gd[0]; }
}
int pga_sub(void *s, int cbid) { want = cbid; return ((sub_fn)s)(&sub, (void *)cb, 0); }
int pga_enable(void *e, int on, int domain, int cbid) { return ((en_fn)e)((uint32_t)on, sub, domain, cbid); }
int pga_unsub(void *u) { int rc = ((unsub_fn)u)(sub); sub = 0; return rc; }
long long pga_count(void) { return nn; }
void *pga_node(long long i) { return nodes[i]; }
void *pga_graph(long long i) { return graphs[i]; }
void pga_reset(void) { nn = 0; }
"""


def build() -> ctypes.CDLL:
    d = tempfile.mkdtemp(prefix="pga-cupti-probe-")
    src, so = os.path.join(d, "cb.c"), os.path.join(d, "cb.so")
    with open(src, "w") as f:
        f.write(C_SRC)
    subprocess.check_call(["cc", "-O2", "-shared", "-fPIC", "-o", so, src])
    lib = ctypes.CDLL(so)
    for name, res, args in (("pga_sub", ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
                            ("pga_enable", ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]),
                            ("pga_unsub", ctypes.c_int, [ctypes.c_void_p]), ("pga_count", ctypes.c_longlong, []),
                            ("pga_node", ctypes.c_void_p, [ctypes.c_longlong]),
                            ("pga_graph", ctypes.c_void_p, [ctypes.c_longlong]), ("pga_reset", None, [])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def out(**kw) -> None:
    print(json.dumps(kw, default=str), flush=True)


def side_stream_capture(cb, be) -> dict:
    """A capture with side-stream work between main-stream ops; callback order vs listing."""
    a = torch.randn(256, 256, device="cuda")
    ((a @ a).sin() * 2).cos()  # cuBLAS and the kernels loaded before the capture
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    checks = []
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        main = torch.cuda.current_stream()
        graph = be.capture_graph(main.cuda_stream)
        base = cb.pga_count()

        def check(tag):
            listing = be.list_nodes(graph)
            got = [cb.pga_node(i) for i in range(base, cb.pga_count())]
            mine = [n for i, n in zip(range(base, cb.pga_count()), got) if cb.pga_graph(i) == graph]
            checks.append({"at": tag, "listed": len(listing), "callbacks": len(got), "same_graph": len(mine),
                           "same_order": [int(x) for x in listing] == [int(x) for x in mine]})
        b = a @ a
        check("after 1 main op")
        s.wait_stream(main)
        with torch.cuda.stream(s):
            c = (a * 2).sin()
            d = c @ c
        check("after side work, before join")
        e = b.cos() + 1
        check("main op after side work, before join")
        main.wait_stream(s)
        f = e + d
        check("after join")
        for _ in range(5):
            f = f * 1.0001
        check("end")
    return {"checks": checks}


def timing(cb, cupti, dom, cbid, model, x) -> dict:
    en = ctypes.cast(cupti.cuptiEnableCallback, ctypes.c_void_p).value
    secs = {"cb_on": [], "cb_off": []}
    eager = {"cb_on": [], "cb_off": []}
    pool, keep = None, []
    for r in range(16):
        for arm in (("cb_on", "cb_off") if r % 2 == 0 else ("cb_off", "cb_on")):
            cb.pga_enable(en, 1 if arm == "cb_on" else 0, dom, cbid)
            t, g, _ = capture_once(model, x, pool)
            pool = g.pool() if pool is None else pool
            secs[arm].append(t)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            eager[arm].append(time.perf_counter() - t0)
            keep.append(g)  # a pool outlives no graph of it
    cb.pga_enable(en, 1, dom, cbid)
    med = statistics.median
    return {"capture_ms": {a: round(med(v) * 1e3, 3) for a, v in secs.items()},
            "eager_ms": {a: round(med(v) * 1e3, 3) for a, v in eager.items()},
            "pairs": round(med([a / b for a, b in zip(secs["cb_on"], secs["cb_off"])]), 4)}


def profile_kernels() -> int:
    a = torch.randn(512, 512, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            a = (a @ a).sin()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)


def main() -> None:
    while_subscribed = "--profile-while-subscribed" in sys.argv
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    path = find_libcupti()
    cupti = ctypes.CDLL(path)
    from cupti import cupti as cp
    dom, cbid = int(cp.CallbackDomain.RESOURCE), int(cp.CallbackIdResource.GRAPHNODE_CREATED)
    out(step="env", libcupti=path, domain=dom, cbid=cbid, torch=torch.__version__)
    cb = build()
    sub = ctypes.cast(cupti.cuptiSubscribe, ctypes.c_void_p).value
    en = ctypes.cast(cupti.cuptiEnableCallback, ctypes.c_void_p).value
    unsub = ctypes.cast(cupti.cuptiUnsubscribe, ctypes.c_void_p).value
    rc = cb.pga_sub(sub, cbid)
    out(step="subscribe", rc=rc)
    if rc:
        return
    out(step="enable", rc=cb.pga_enable(en, 1, dom, cbid))
    be = backends.active()
    out(step="side streams", **side_stream_capture(cb, be))
    if while_subscribed:
        n = profile_kernels()
        out(step="profile while subscribed", cuda_events=n)
    model = Decoder(decoder_weights(36))
    x = torch.randn(16, 128, 1024, device="cuda").to(torch.bfloat16)
    with torch.no_grad():
        warmup(lambda: model(x))
        cb.pga_reset()
        t, g, _ = capture_once(model, x, None)
        out(step="decoder callbacks", callbacks=cb.pga_count())
        del g
        out(step="timing", **timing(cb, cupti, dom, cbid, model, x))
    cycles = []
    for _ in range(5):
        t0 = time.perf_counter()
        cb.pga_unsub(unsub)
        t1 = time.perf_counter()
        rc = cb.pga_sub(sub, cbid) or cb.pga_enable(en, 1, dom, cbid)
        cycles.append({"unsub_us": round((t1 - t0) * 1e6, 1), "sub_enable_us": round((time.perf_counter() - t1) * 1e6, 1), "rc": rc})
    out(step="subscribe cycles", cycles=cycles)
    out(step="unsubscribe", rc=cb.pga_unsub(unsub))
    out(step="profile after unsubscribe", cuda_events=profile_kernels())
    out(step="subscribe after a profile", rc=cb.pga_sub(sub, cbid))


if __name__ == "__main__":
    main()
