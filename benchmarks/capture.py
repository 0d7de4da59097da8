"""Capture-time annotation cost on a GPU (run on the GPU machine).

Measures, on the seed's transformer block (B=4, T=256, D=1024, H=8, fp32):
- capture time: ``torch.cuda.graph`` with the unannotated block vs ``pga.graph`` with the
  seed's four scopes (on the compiled capture path where built; ``--python-arm`` adds the
  pure-Python path as a third interleaved arm) (calibration off, so only scope bookkeeping, the template copy and
  rekeying are timed), median of N captures each, interleaved; and, apart, the deferred
  node table read on first use of the graph's record after the capture;
- replay time: 200 replays of the plain graph vs the annotated one (CUDA events), median
  of 5 rounds, interleaved (annotation must not change the executable graph);
- calibration time: ``calibrate(g)`` (one replay under a CUPTI activity session) vs one
  plain replay (synchronized, wall clock).
Prints a JSON report; ``--out FILE`` also writes it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
import perfetto_graph_ann as pga  # noqa: E402
from blocks import seed_block, warmup  # noqa: E402
from perfetto_graph_ann.capture import fastpath  # noqa: E402
from perfetto_graph_ann.capture.api import calibrate  # noqa: E402


PARTS = {"finish_capture": [], "bind_exec": [], "deferred_record": []}


def _timed(name, fn):
    def run(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            PARTS[name].append(time.perf_counter() - t0)

    return run


def capture_s(fn, annotated: bool, compiled: bool = True) -> float:
    fastpath.ENABLED = compiled and fastpath.module_built()
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with (pga.graph(g, calibrate=False) if annotated else torch.cuda.graph(g)):
        fn()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if annotated:  # the node table, read from the template's copy on first use
        t1 = time.perf_counter()
        g._pga_session.record
        PARTS["deferred_record"].append(time.perf_counter() - t1)
    g.reset()
    return dt


def replay_ms(g, n: int = 200) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--captures", type=int, default=60)
    ap.add_argument("--layers", type=int, default=1, help="chain this many seed blocks (14 kernels, 4 scopes each)")
    ap.add_argument("--capture-only", action="store_true",
                    help="time captures only (no replay / calibration): for large --layers")
    ap.add_argument("--python-arm", action="store_true",
                    help="also time the annotated captures on the pure-Python capture path (interleaved)")
    ap.add_argument("--out")
    args = ap.parse_args()
    from perfetto_graph_ann.capture.session import CaptureSession

    for name in ("finish_capture", "bind_exec"):  # where the annotated capture's extra time goes
        setattr(CaptureSession, name, _timed(name, getattr(CaptureSession, name)))
    plain_fn, ann_fn = seed_block(annotate=False, layers=args.layers), seed_block(annotate=True, layers=args.layers)
    warmup(plain_fn)
    warmup(ann_fn)
    cap_plain, cap_ann, cap_py = [], [], []
    for _ in range(args.captures):  # interleaved so drift hits every arm
        cap_plain.append(capture_s(plain_fn, False))
        cap_ann.append(capture_s(ann_fn, True))
        if args.python_arm:
            cap_py.append(capture_s(ann_fn, True, compiled=False))
    fastpath.ENABLED = fastpath.module_built()
    med = statistics.median
    rep = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "backend": pga.backend_info()["backend"],
        "capture_path": fastpath.describe(),
        "captures": args.captures, "layers": args.layers, "kernels_per_replay": 14 * args.layers,
        "capture_ms_plain_median": med(cap_plain) * 1e3, "capture_ms_annotated_median": med(cap_ann) * 1e3,
        "capture_overhead_pct": (med(cap_ann) / med(cap_plain) - 1) * 100,
        # captures are CPU-bound driver work; the fastest capture is the least disturbed by the host
        "capture_ms_plain_min": min(cap_plain) * 1e3, "capture_ms_annotated_min": min(cap_ann) * 1e3,
        "capture_overhead_pct_of_min": (min(cap_ann) / min(cap_plain) - 1) * 100,
        "capture_ms_plain_p25_p75": [statistics.quantiles(cap_plain, n=4)[i] * 1e3 for i in (0, 2)],
        "capture_ms_annotated_p25_p75": [statistics.quantiles(cap_ann, n=4)[i] * 1e3 for i in (0, 2)],
        "finish_capture_ms_median": med(PARTS["finish_capture"]) * 1e3,
        "bind_exec_ms_median": med(PARTS["bind_exec"]) * 1e3,
        "deferred_record_ms_median": med(PARTS["deferred_record"]) * 1e3,
    }
    if cap_py:  # the same annotated captures on the pure-Python path, same run
        rep.update({
            "capture_ms_python_path_median": med(cap_py) * 1e3, "capture_ms_python_path_min": min(cap_py) * 1e3,
            "capture_overhead_pct_python_path": (med(cap_py) / med(cap_plain) - 1) * 100,
            "capture_overhead_pct_of_min_python_path": (min(cap_py) / min(cap_plain) - 1) * 100,
        })
    if not args.capture_only:
        rep.update(replay_and_calibration(plain_fn, ann_fn))
    text = json.dumps(rep, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


def replay_and_calibration(plain_fn, ann_fn) -> dict:
    """Replay time of both graphs (CUDA events) and calibrate()'s wall time vs one replay."""
    gp, ga = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(gp):
        plain_fn()
    with pga.graph(ga, calibrate=False):
        ann_fn()
    for _ in range(20):
        gp.replay()
        ga.replay()
    rp, ra = [], []
    for _ in range(5):
        rp.append(replay_ms(gp))
        ra.append(replay_ms(ga))
    one, cal = [], []
    for _ in range(10):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        gp.replay()
        torch.cuda.synchronize()
        one.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        calibrate(ga)
        cal.append(time.perf_counter() - t0)
    med = statistics.median
    return {
        "replay_ms_plain_median": med(rp), "replay_ms_annotated_median": med(ra),
        "replay_ratio": med(ra) / med(rp), "replay_ms_plain_all": rp, "replay_ms_annotated_all": ra,
        "one_replay_sync_ms_median": med(one) * 1e3, "calibration_ms_median": med(cal) * 1e3,
        "calibration_ms_first": cal[0] * 1e3,
        "calibration_minus_one_replay_ms": (med(cal) - med(one)) * 1e3,
    }


if __name__ == "__main__":
    main()
