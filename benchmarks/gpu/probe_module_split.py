"""Where a module scope's capture time goes, by arms (GPU machine; issue 31's capture cost).

The 36-layer module decoder of ``module_capture.py`` (325 module calls), captured with
``torch.cuda.graph`` in rotating arm order each round:

- ``plain``: not instrumented;
- ``inst``: ``instrument()`` (no module scopes);
- ``wrap``: ``instrument(modules=ModuleScopes(exclude=("*",)))``: the ``__call__`` wrapper runs
  for every module call, no scope is opened;
- ``nodriver``: module scopes whose edges ask nothing at all (a C counter returning 0: the
  labels are wrong, only the cost matters);
- ``full``: module scopes as shipped (edges from CUPTI's node-created count);
- ``driver``: module scopes with ``PERFETTO_GRAPH_ANN_NODE_WATCH=0`` (edges ask the driver:
  marker nodes past 512 nodes).

Statistic: median over rounds of capture / plain capture of the same round. Then a cProfile
of ``full``. Prints JSON. Not a test.

    python benchmarks/gpu/probe_module_split.py [--rounds 16]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "tests", "gpu")]
from module_capture import Decoder, capture_once, decoder_weights, warmup  # noqa: E402

import perfetto_graph_ann as pga  # noqa: E402
from perfetto_graph_ann.capture import session as S  # noqa: E402

MODE = {"edges": None}
_start = S.CaptureSession.start


def _patched_start(self, *a, **k):
    _start(self, *a, **k)
    if MODE["edges"] == "nodriver":
        self.stop_watch()
        self.recorder.set_counter(int)


S.CaptureSession.start = _patched_start

ARMS = {  # name: (instrument kwargs or None, edges mode)
    "plain": (None, None),
    "inst": ({}, None),
    "wrap": ({"modules": pga.ModuleScopes(exclude=("*",))}, None),
    "nodriver": ({"modules": True}, "nodriver"),
    "full": ({"modules": True}, None),
    "driver": ({"modules": True}, "driver"),
}


def run_arm(arm, model, x, pool):
    kw, MODE["edges"] = ARMS[arm]
    os.environ["PERFETTO_GRAPH_ANN_NODE_WATCH"] = "0" if MODE["edges"] == "driver" else "1"
    if kw is None:
        return capture_once(model, x, pool)
    with pga.instrument(calibrate=False, **kw):
        return capture_once(model, x, pool)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=16)
    args = ap.parse_args()
    model = Decoder(decoder_weights(36))
    x = torch.randn(16, 128, 1024, device="cuda").to(torch.bfloat16)
    names = list(ARMS)
    secs = {a: [] for a in names}
    with torch.no_grad():
        warmup(lambda: model(x))
        pool, keep = None, []
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            if r % 2:
                order = order[::-1]
            for arm in order:
                t, g, _ = run_arm(arm, model, x, pool)
                pool = g.pool() if pool is None else pool
                secs[arm].append(t)
                keep.append(g)  # a pool outlives no graph of it
        med = statistics.median
        rep = {"capture_ms": {a: round(med(v) * 1e3, 3) for a, v in secs.items()},
               "pairs": {a: round(med([t / p for t, p in zip(v, secs["plain"])]), 4) for a, v in secs.items()}}
        print(json.dumps(rep), flush=True)
        prof = cProfile.Profile()
        MODE["edges"] = None
        os.environ["PERFETTO_GRAPH_ANN_NODE_WATCH"] = "1"
        with pga.instrument(modules=True, calibrate=False):
            prof.enable()
            for _ in range(4):
                capture_once(model, x, pool)
            prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(22)
    print(s.getvalue()[:7000])


if __name__ == "__main__":
    main()
