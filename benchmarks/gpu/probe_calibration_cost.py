"""Where a calibration's time goes (GPU probe; results in tests/gpu/RESULTS.md).

Run on the GPU machine: ``python3 benchmarks/gpu/probe_calibration_cost.py --out FILE``. Not a
test: it measures and prints. On a ~1,000-node decoder graph (tests/gpu/blocks.py), each
phase of a CUPTI activity session around one replay is timed on its own, in variants:

- ``full``: what calibration does (register callbacks; enable kernel, memcpy, memset;
  synchronize; replay; synchronize; flush; disable), repeated to see first vs later costs;
- ``kernel_only``: only CONCURRENT_KERNEL enabled;
- ``no_replay``: the session without a replay (its fixed cost);
- ``three_replays``: three replays inside one session (is the first traced launch slower?);
- ``flush0``: ``activity_flush_all(0)`` instead of the forced flush;
- the next plain replays after a session (does leaving tracing cost a replay?);
- ``direct``: the session calibration uses (capture/activity.py: our own buffer callbacks,
  records read in C);
- ``hw_trace``: whether ``activity_enable_hw_trace(1)`` is accepted here.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests")]
from blocks import decoder, decoder_weights, warmup  # noqa: E402

from cupti import cupti  # noqa: E402

med = statistics.median
K = cupti.ActivityKind


def sync_replay_ms(g) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def session(g, kinds, replays=1, flush=1, decode=True):
    """One activity session around ``replays`` replays; ms per phase and the record count."""
    t, n = {}, [0]

    def requested():
        return 2 << 20, 0

    def completed(acts):
        t0 = time.perf_counter()
        if decode:
            for a in acts:
                n[0] += bool(getattr(a, "graph_node_id", 0))
        else:
            n[0] += len(acts)
        t["decode"] = t.get("decode", 0) + (time.perf_counter() - t0) * 1e3

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    cupti.activity_register_callbacks(requested, completed)
    t["register"] = (time.perf_counter() - t0) * 1e3
    for k in kinds:
        t0 = time.perf_counter()
        cupti.activity_enable(k)
        t[f"enable_{k.name}"] = (time.perf_counter() - t0) * 1e3
    for i in range(replays):
        t0 = time.perf_counter()
        g.replay()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        t[f"launch_{i}"], t[f"gpu_wait_{i}"] = (t1 - t0) * 1e3, (t2 - t1) * 1e3
    t0 = time.perf_counter()
    cupti.activity_flush_all(flush)
    t["flush"] = (time.perf_counter() - t0) * 1e3
    for k in kinds:
        t0 = time.perf_counter()
        cupti.activity_disable(k)
        t[f"disable_{k.name}"] = (time.perf_counter() - t0) * 1e3
    t["records"] = n[0]
    t["next_plain_replay"] = sync_replay_ms(g)
    t["second_plain_replay"] = sync_replay_ms(g)
    return t


def direct_session(g):
    """The session calibration uses now (capture/activity.py): our buffers, records read in C."""
    from perfetto_graph_ann.capture import activity

    got, t = [], {}
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ctx = activity.api().session(got, None)
    ctx.__enter__()
    t1 = time.perf_counter()
    g.replay()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    ctx.__exit__(None, None, None)
    t3 = time.perf_counter()
    t.update(start=(t1 - t0) * 1e3, replay_and_sync=(t2 - t1) * 1e3, stop=(t3 - t2) * 1e3, records=len(got))
    t["next_plain_replay"] = sync_replay_ms(g)
    return t


def summarize(runs):
    keys = sorted({k for r in runs for k in r})
    return {"first": runs[0], "median_of_rest": {k: round(med([r.get(k, 0) for r in runs[1:]]), 3) for k in keys}
            if len(runs) > 1 else {}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=46)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out")
    args = ap.parse_args()
    fn = decoder(decoder_weights(args.layers), args.batch, annotate=False)
    warmup(fn)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(5):
        g.replay()
    plain = [sync_replay_ms(g) for _ in range(10)]
    three = [K.CONCURRENT_KERNEL, K.MEMCPY, K.MEMSET]
    rep = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "layers": args.layers,
           "plain_sync_replay_ms_median": med(plain)}
    rep["full"] = summarize([session(g, three) for _ in range(6)])
    rep["kernel_only"] = summarize([session(g, [K.CONCURRENT_KERNEL]) for _ in range(4)])
    rep["no_replay"] = summarize([session(g, three, replays=0) for _ in range(4)])
    rep["three_replays"] = summarize([session(g, three, replays=3) for _ in range(3)])
    rep["flush0"] = summarize([session(g, three, flush=0) for _ in range(3)])
    rep["no_decode"] = summarize([session(g, three, decode=False) for _ in range(3)])
    rep["direct"] = summarize([direct_session(g) for _ in range(6)])
    try:
        cupti.activity_enable_hw_trace(1)
        rep["hw_trace"] = summarize([session(g, three) for _ in range(3)])
        cupti.activity_enable_hw_trace(0)
    except Exception as e:
        rep["hw_trace"] = f"refused: {e}"
    rep["plain_after_all_ms_median"] = med([sync_replay_ms(g) for _ in range(10)])
    text = json.dumps(rep, indent=1, default=str)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
