"""Where a module scope's capture time goes (GPU machine): cProfile of captures of the 36-layer
module decoder (benchmarks/gpu/module_capture.py) under ``instrument(modules=True)``, and the
capture time per arm: plain, modules, modules with ``backward=False``, modules counting every edge
(no marker nodes), and the forward alone with the module hooks registered outside a capture.

    python benchmarks/gpu/probe_module_scopes.py
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import torch

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests")]
from module_capture import Decoder, capture_once, decoder_weights, warmup  # noqa: E402

import perfetto_graph_ann as pga  # noqa: E402
from perfetto_graph_ann.capture import modules as M  # noqa: E402


def main() -> None:
    model = Decoder(decoder_weights(36))
    x = torch.randn(16, 128, 1024, device="cuda").to(torch.bfloat16)
    arms = {
        "plain": None,
        "modules": pga.ModuleScopes(),
        "modules_backward_false": pga.ModuleScopes(backward=False),
        "modules_depth2": pga.ModuleScopes(max_depth=2),
    }
    with torch.no_grad():
        warmup(lambda: model(x))
        pool = None
        secs = {a: [] for a in arms}
        for r in range(12):
            for arm, cfg in (list(arms.items()) if r % 2 == 0 else list(arms.items())[::-1]):
                if cfg is None:
                    t, g, _ = capture_once(model, x, pool)
                else:
                    with pga.instrument(modules=cfg, calibrate=False):
                        t, g, _ = capture_once(model, x, pool)
                pool = g.pool() if pool is None else pool
                secs[arm].append(t)
        print({a: round(statistics.median(v) * 1e3, 2) for a, v in secs.items()})
        # the forward alone, hooks registered, outside a capture
        for label in ("no hooks", "hooks registered"):
            if label == "hooks registered":
                M.HOOKS.capture_started(pga.ModuleScopes())
            ts = []
            for _ in range(20):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                model(x)
                ts.append(time.perf_counter() - t0)
            if label == "hooks registered":
                M.HOOKS.capture_ended()
            print(label, round(statistics.median(ts) * 1e3, 2), "ms eager forward")
        prof = cProfile.Profile()
        with pga.instrument(modules=True, calibrate=False):
            prof.enable()
            for _ in range(5):
                capture_once(model, x, pool)
            prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
        print(s.getvalue()[:9000])


if __name__ == "__main__":
    main()
