"""Does an initialised CUPTI make a plain capture slower (issue 31's fresh-process numbers)?

One fresh process per ``--when``: the 36-layer decoder captured plain (no instrumentation)
``--captures`` times, CUPTI's callback API initialised (one subscribe + unsubscribe, what the
node watch's warm-up does) ``early`` (before the model is built), ``late`` (between the first
half of the captures and the second) or ``none``; ``held``: subscribed with the node-created
callback enabled during the second half. Prints each capture's ms as JSON.

    python benchmarks/gpu/probe_cupti_cost.py --when none|early|late|held [--captures 8]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "gpu"))

import torch  # noqa: E402

from blocks import decoder_weights, warmup  # noqa: E402
from module_capture import Decoder, capture_once  # noqa: E402


def cupti():
    from perfetto_graph_ann.capture import backends, fastpath, nodewatch

    return fastpath.module(), backends.active().node_watch_functions(), nodewatch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--when", choices=("none", "early", "late", "held"), required=True)
    ap.add_argument("--captures", type=int, default=8)
    args = ap.parse_args()
    torch.cuda.init()
    t = {}
    if args.when == "early":
        fast, fns, nw = cupti()
        t0 = time.perf_counter()
        nw.WATCH.warm_up(fns)
        t["warm_ms"] = (time.perf_counter() - t0) * 1e3
    model = Decoder(decoder_weights(36))
    x = torch.randn(16, 128, 1024, device="cuda").to(torch.bfloat16)
    times, pool = [], None
    with torch.no_grad():
        warmup(lambda: model(x))
        for i in range(args.captures):
            if i == args.captures // 2 and args.when in ("late", "held"):
                fast, fns, nw = cupti()
                t0 = time.perf_counter()
                if args.when == "late":
                    nw.WATCH.warm_up(fns)
                else:
                    fast.watch_subscribe(fns[0], fns[1], nw.RESOURCE_DOMAIN, nw.GRAPHNODE_CREATED)
                t["warm_ms"] = (time.perf_counter() - t0) * 1e3
            s, g, _ = capture_once(model, x, pool)
            pool = g.pool() if pool is None else pool
            times.append(round(s * 1e3, 3))
    print(json.dumps({"when": args.when, "capture_ms": times, **t}))


if __name__ == "__main__":
    main()
