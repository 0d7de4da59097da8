"""What the decoder's 216 scope edges cost inside a real capture, split by cause (GPU probe).

Interleaved captures of the 36-layer decoder at batch 16 (tests/gpu/blocks.py), one graph
each (reset after), in rotating order, with these variants:

- ``plain``: ``torch.cuda.graph``, no scopes (``nullcontext`` in their place);
- ``fixed``: ``pga.graph`` around the same code (its fixed cost only);
- ``nodriver``: ``pga.graph`` with the scopes, edges positioned by a C counter that asks the
  driver nothing (every scope empty: the labels are wrong, only the cost is of interest);
- ``count``: edges count the graph's nodes (``cuGraphGetNodes``), no marker nodes;
- ``m0`` / ``m256`` / ``m1024``: marker nodes from 0 / 256 / 1,024 nodes on (count before);
- ``full``: what ships (markers from 512 nodes);
- ``bwfalse``: ``full`` with ``mark_kernels(..., backward=False)``;
- ``plain_nogc`` / ``full_nogc``: ``plain`` / ``full`` with the garbage collector off around
  the capture;
- ``plain2``: ``plain`` again (the spread between two identical arms: the noise floor);
- ``nd_bwf``: ``nodriver`` with ``backward=False``;
- ``nd_cheap``: ``nodriver`` with torch's functions that a scope calls (current autograd node,
  grad mode, autograd's counter) replaced by C builtins returning the same "nothing" answers;
- ``nd_cheapnorm``: ``nd_cheap`` with a dict annotation copied by ``dict`` instead of
  ``normalize_annotation`` (a Python function).

Per variant: medians and mins of the whole capture and of the captured code alone, and
the garbage collections (count, ms) that ran inside the captures. Prints JSON. Not a test.

    python3 benchmarks/gpu/probe_decoder_edges.py --captures 20
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2] / "tests" / "gpu")]
import torch  # noqa: E402
from blocks import capture_set, decoder, decoder_weights, warmup  # noqa: E402

from perfetto_graph_ann.capture import autograd as A  # noqa: E402
from perfetto_graph_ann.capture import fastpath as F  # noqa: E402
from perfetto_graph_ann.capture import marks as M  # noqa: E402
from perfetto_graph_ann.capture import session as S  # noqa: E402
from perfetto_graph_ann.capture.scopes import normalize_annotation  # noqa: E402

MODE = {"edges": None}


def cheap_calls(on: bool, norm: bool = False) -> None:
    """Swap torch's functions a scope calls (and the normalizer) for C builtins, or back."""
    if on:
        F._c.mark_torch(torch, type(None), bool)  # no current node; grad "off"
        A._peek_now()
        A._peek = int  # the counter reads 0 at entry and exit: nothing made
    else:
        M._setup_fast()
        A._peek = None
        A._peek_now()
    F._c.mark_setup(S._local, A, F, dict if norm else normalize_annotation)
_init, _start = S.CaptureSession.__init__, S.CaptureSession.start


def _patched_init(self, *a, **k):
    _init(self, *a, **k)
    if MODE["edges"] and MODE["edges"] == "count":
        self.markers_from = None
    elif MODE["edges"] and MODE["edges"].startswith("markers="):
        self.markers_from = int(MODE["edges"].split("=")[1])


def _patched_start(self, *a, **k):
    _start(self, *a, **k)
    if MODE["edges"] and MODE["edges"].startswith("nodriver"):
        self.recorder.set_counter(int)  # int() -> 0: a C call, no driver


S.CaptureSession.__init__ = _patched_init
S.CaptureSession.start = _patched_start

GC = {"n": 0, "ms": 0.0, "t0": 0.0}


def _gc_cb(phase, info):
    if phase == "start":
        GC["t0"] = time.perf_counter()
    else:
        GC["n"] += 1
        GC["ms"] += (time.perf_counter() - GC["t0"]) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--captures", type=int, default=20)
    ap.add_argument("--variants", default="plain,fixed,nodriver,count,full,bwfalse,plain_nogc,full_nogc,plain2")
    args = ap.parse_args()
    w = decoder_weights()
    fns = {"plain": decoder(w, 16, annotate=False), "ann": decoder(w, 16, annotate=True),
           "bwf": decoder(w, 16, annotate=True, backward=False)}
    for f in fns.values():
        warmup(f)
    variants = {  # name: (fn, annotated, edges mode, gc off)
        "plain": ("plain", False, None, False), "fixed": ("plain", True, None, False),
        "nodriver": ("ann", True, "nodriver", False), "count": ("ann", True, "count", False),
        "full": ("ann", True, None, False), "bwfalse": ("bwf", True, None, False),
        "plain_nogc": ("plain", False, None, True), "full_nogc": ("ann", True, None, True),
        "plain2": ("plain", False, None, False),
        "nd_bwf": ("bwf", True, "nodriver", False), "nd_cheap": ("ann", True, "nodriver+cheap", False),
        "nd_cheapnorm": ("ann", True, "nodriver+cheap+norm", False),
        **{f"m{n}": ("ann", True, f"markers={n}", False) for n in (0, 256, 1024)},
    }
    variants = {k: variants[k] for k in args.variants.split(",")}
    for fn, ann, _, _ in variants.values():  # warm-up capture of each kind
        gs, _, _ = capture_set([fns[fn]], annotated=ann, calibrate=False)
        gs[0].reset()
    gc.callbacks.append(_gc_cb)
    res = {k: {"total": [], "fn": [], "gc_n": 0, "gc_ms": 0.0, "nodes": None} for k in variants}
    names = list(variants)
    for i in range(args.captures):
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            fn, ann, edges, nogc = variants[name]
            MODE["edges"] = edges
            fs = []
            GC["n"], GC["ms"] = 0, 0.0
            cheap = bool(edges) and "cheap" in edges
            if cheap:
                cheap_calls(True, "norm" in edges)
            if nogc:
                gc.disable()
            try:
                gs, _, secs = capture_set([fns[fn]], annotated=ann, calibrate=False, fn_secs=fs)
            finally:
                if nogc:
                    gc.enable()
                if cheap:
                    cheap_calls(False)
            r = res[name]
            r["total"].append(secs[0] * 1e3)
            r["fn"].append(fs[0] * 1e3)
            r["gc_n"] += GC["n"]
            r["gc_ms"] += GC["ms"]
            sess = getattr(gs[0], "_pga_session", None)
            if sess is not None and r["nodes"] is None:
                r["nodes"] = [len(sess.nodes or []), len(sess._markers)]
            gs[0].reset()
            torch.cuda.synchronize()
    gc.callbacks.remove(_gc_cb)
    out = {}
    for name, r in res.items():
        out[name] = {"total_med": round(statistics.median(r["total"]), 3), "total_min": round(min(r["total"]), 3),
                     "fn_med": round(statistics.median(r["fn"]), 3), "fn_min": round(min(r["fn"]), 3),
                     "gc_per_capture": round(r["gc_n"] / args.captures, 2),
                     "gc_ms_per_capture": round(r["gc_ms"] / args.captures, 3), "nodes": r["nodes"]}
    base = out["plain"]
    for name, o in out.items():
        o["ratio_med"] = round(o["total_med"] / base["total_med"], 3)
        o["ratio_min"] = round(o["total_min"] / base["total_min"], 3)
        # paired: each capture against the plain capture of the same rotation
        o["ratio_of_pairs_med"] = round(statistics.median(
            a / b for a, b in zip(res[name]["total"], res["plain"]["total"])), 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
