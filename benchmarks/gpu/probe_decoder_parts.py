"""Where an annotated decoder capture's time goes beyond the captured code (GPU machine).

Times, per annotated capture of the 36-layer decoder at batch 16 (tests/gpu/blocks.py), the
session's fixed steps by wrapping them: ``CaptureSession`` construction, ``start``,
``finish_capture`` and inside it the template's copy (``clone_graph``), ``bind_exec``; and the
node count of the graph. Interleaved with plain captures; medians of ``--captures``.

    python3 benchmarks/gpu/probe_decoder_parts.py --captures 15
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2] / "tests" / "gpu")]
import torch  # noqa: E402
from blocks import capture_set, decoder, decoder_weights, warmup  # noqa: E402

from perfetto_graph_ann.capture import session as S  # noqa: E402

T = {}


def timed(obj, name, key):
    orig = getattr(obj, name)

    def run(*a, **k):
        t0 = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            T.setdefault(key, []).append((time.perf_counter() - t0) * 1e3)
    setattr(obj, name, run)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--captures", type=int, default=15)
    ap.add_argument("--after-calibration", action="store_true",
                    help="replay one annotated graph first (its calibration starts CUPTI's activity API)")
    args = ap.parse_args()
    for name in ("start", "finish_capture", "bind_exec"):
        timed(S.CaptureSession, name, name)
    orig_init = S.CaptureSession.__init__

    def init(self, backend, *a, **k):
        t0 = time.perf_counter()
        orig_init(self, backend, *a, **k)
        T.setdefault("session_init", []).append((time.perf_counter() - t0) * 1e3)
        if not getattr(type(backend), "_pga_probe", False):
            timed(type(backend), "clone_graph", "clone_graph")
            type(backend)._pga_probe = True
    S.CaptureSession.__init__ = init
    w = decoder_weights()
    plain, ann = decoder(w, 16, annotate=False), decoder(w, 16, annotate=True)
    warmup(plain)
    warmup(ann)
    capture_set([plain], annotated=False), capture_set([ann], calibrate=False)  # warm-up
    if args.after_calibration:
        gs, _, _ = capture_set([ann], annotated=True, calibrate=True)
        gs[0].replay()
        torch.cuda.synchronize()
        print("calibration note after one replay:", gs[0]._pga_session.calibration_note, file=sys.stderr)
    T.clear()
    tot = {"plain": [], "annotated": []}
    nodes = []
    for _ in range(args.captures):
        g, _, s = capture_set([plain], annotated=False)
        tot["plain"].append(s[0] * 1e3)
        g2, _, s2 = capture_set([ann], annotated=True, calibrate=True)
        tot["annotated"].append(s2[0] * 1e3)
        nodes.append((len(g2[0]._pga_session.nodes or []), len(g2[0]._pga_session._markers)))
        for x in g + g2:
            x.reset()
        torch.cuda.synchronize()
    out = {k: round(statistics.median(v), 3) for k, v in {**tot, **T}.items()}
    out["nodes"], out["markers"] = nodes[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
