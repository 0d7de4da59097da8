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

``--decoder``: a 36-layer bf16 decoder (tests/gpu/blocks.py ``decoder``: RMSNorm, SDPA,
SiLU-gated MLP, ``{"name": "layer", "layer": i}`` around ``attn`` / ``mlp`` scopes) captured
for several batch sizes (``--batches``, largest first) sharing one memory pool, per round:
the plain set (``torch.cuda.graph``) and the annotated set (``pga.graph``, default
calibration: recorded at the first replay), in alternating order; then each graph's first
replay (synchronized wall clock; the annotated one records the calibration table) and
steady replays (CUDA events, interleaved across all graphs). Medians over ``--rounds``.
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
from blocks import capture_set, decoder, decoder_weights, seed_block, warmup  # noqa: E402
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
    ap.add_argument("--decoder", action="store_true", help="the decoder benchmark (see the module docstring)")
    ap.add_argument("--backward-false-arm", action="store_true",
                    help="--decoder: also capture the annotated set with mark_kernels(..., backward=False)")
    ap.add_argument("--batches", default="16,8,4,1", help="--decoder: batch sizes, one graph each")
    ap.add_argument("--rounds", type=int, default=8, help="--decoder: interleaved rounds")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.decoder:
        return decoder_main(args)
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


def _first_replay_s(g) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    g.replay()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def decoder_main(args) -> None:
    from perfetto_graph_ann.capture import calibration
    from perfetto_graph_ann.capture.registry import REGISTRY

    layers = args.layers if args.layers > 1 else 36
    batches = [int(b) for b in args.batches.split(",")]
    weights = decoder_weights(layers)
    plain = [decoder(weights, b, annotate=False) for b in batches]
    ann = [decoder(weights, b, annotate=True) for b in batches]
    nobw = [decoder(weights, b, annotate=True, backward=False) for b in batches]
    for fn in plain + ann + (nobw if args.backward_false_arm else []):
        warmup(fn)
    fns = {"plain": plain, "annotated": ann, "python": ann, "backward_false": nobw}
    # "python": the annotated set again on the pure-Python capture path (--python-arm);
    # "backward_false": the annotated set with mark_kernels(..., backward=False)
    arms = ("plain", "annotated") + (("python",) if args.python_arm else ()) + (
        ("backward_false",) if args.backward_false_arm else ())
    cap = {a: {b: [] for b in batches} for a in arms}
    first = {a: {b: [] for b in batches} for a in arms}
    steady = {a: {b: [] for b in batches} for a in arms}
    cal_parts, nodes, equal = [], {}, []
    # where a capture's time goes, per arm: the captured code itself, torch's enter / exit
    # (capture begin; capture end + instantiation), the rest is ours
    phases = {a: {"fn": [], "torch_enter": [], "torch_exit": [], "total": []} for a in arms}
    current = ["plain"]
    cls = torch.cuda.graph
    orig_enter, orig_exit = cls.__enter__, cls.__exit__

    def timed(name, fn):
        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                phases[current[0]][name].append(time.perf_counter() - t0)
        return run

    cls.__enter__, cls.__exit__ = timed("torch_enter", orig_enter), timed("torch_exit", orig_exit)
    for r in range(args.rounds):
        sets = {}
        for arm in (arms if r % 2 == 0 else arms[::-1]):  # alternate which set is captured first
            current[0] = arm
            fastpath.ENABLED = fastpath.module_built() and arm != "python"
            graphs, outs, secs = capture_set(fns[arm], annotated=arm != "plain", fn_secs=phases[arm]["fn"])
            phases[arm]["total"].extend(secs)
            sets[arm] = (graphs, outs)
            for b, t in zip(batches, secs):
                cap[arm][b].append(t)
        fastpath.ENABLED = fastpath.module_built()  # replays and calibration on the default path
        for i, b in enumerate(batches):
            for arm in (arms if (r + i) % 2 == 0 else arms[::-1]):
                first[arm][b].append(_first_replay_s(sets[arm][0][i]))
                if arm == "annotated" and i == 0:
                    cal_parts.append(dict(calibration.LAST_TIMES))
        rec = REGISTRY.get(sets["annotated"][0][0]._pga_owner)
        nodes = {"nodes": len(rec.nodes), "kernels": sum(n.type == "kernel" for n in rec.nodes),
                 "calibrated_after_first_replay": rec.calibrated,
                 "scoped_kernels": sum(1 for n in rec.nodes if n.annotation)}
        for _ in range(3):
            for i, b in enumerate(batches):
                for arm in arms:
                    steady[arm][b].append(replay_ms(sets[arm][0][i], 20))
        torch.cuda.synchronize()
        equal.append(all(torch.equal(p, a) for arm in arms[1:] for p, a in zip(sets["plain"][1], sets[arm][1])))
        for arm in arms:
            for g in sets[arm][0]:
                g.reset()
        del sets
    med = statistics.median
    rows = {}
    for b in batches:
        rows[b] = {
            "capture_ms_plain": med(cap["plain"][b]) * 1e3, "capture_ms_annotated": med(cap["annotated"][b]) * 1e3,
            "capture_ratio": med(cap["annotated"][b]) / med(cap["plain"][b]),
            "first_replay_ms_plain": med(first["plain"][b]) * 1e3,
            "first_replay_ms_annotated": med(first["annotated"][b]) * 1e3,
            "first_replay_extra_ms": (med(first["annotated"][b]) - med(first["plain"][b])) * 1e3,
            # the process's first calibration also starts CUPTI's activity API (once)
            "first_replay_ms_annotated_round0": first["annotated"][b][0] * 1e3,
            "steady_replay_ms_plain": med(steady["plain"][b]), "steady_replay_ms_annotated": med(steady["annotated"][b]),
            "steady_ratio": med(steady["annotated"][b]) / med(steady["plain"][b]),
        }
        if "python" in arms:
            rows[b].update(capture_ms_python_path=med(cap["python"][b]) * 1e3,
                           capture_ratio_python_path=med(cap["python"][b]) / med(cap["plain"][b]))
        if "backward_false" in arms:
            rows[b].update(capture_ms_backward_false=med(cap["backward_false"][b]) * 1e3,
                           capture_ratio_backward_false=med(cap["backward_false"][b]) / med(cap["plain"][b]))
    cls.__enter__, cls.__exit__ = orig_enter, orig_exit
    parts = {k: med([p.get(k, 0.0) for p in cal_parts]) * (1 if k == "records" else 1e3)
             for k in sorted({k for p in cal_parts for k in p})}
    n = len(batches)  # the first batch of each set: phases[arm][name][i * n]
    cap_phases = {a: {k: med(v[::n]) * 1e3 for k, v in phases[a].items() if v} for a in arms}
    for a in arms:
        p = cap_phases[a]
        p["ours"] = p["total"] - p["fn"] - p["torch_enter"] - p["torch_exit"]
    rep = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "backend": pga.backend_info()["backend"],
        "capture_path": fastpath.describe(), "layers": layers, "batches": batches, "rounds": args.rounds,
        "graph": nodes, "outputs_bitwise_equal": all(equal),
        "capture_ms_all_batches_plain": sum(rows[b]["capture_ms_plain"] for b in batches),
        "capture_ms_all_batches_annotated": sum(rows[b]["capture_ms_annotated"] for b in batches),
        "by_batch": rows, "calibration_parts_ms_median": parts,
        f"capture_phases_ms_median_batch{batches[0]}": cap_phases,
        "raw": {"capture_s": cap, "first_replay_s": first, "steady_ms": steady},
    }
    text = json.dumps(rep, indent=1)
    print(json.dumps({k: v for k, v in rep.items() if k != "raw"}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
