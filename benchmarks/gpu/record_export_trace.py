"""GPU helper (issue 33): record the trace ``benchmarks/export_loops_ab.py`` reads on a CPU machine.

    python benchmarks/gpu/record_export_trace.py OUT_DIR [--replays 100] [--layers 36]

The 36-layer decoder of ``export_pace.py`` captured with ``pga.graph`` and calibrated, then one
profile of ``--replays`` replays: its Chrome JSON gzip-compressed (``t<replays>.json.gz``, what
``pga.export`` parses) and the process's annotations with its replay record and recorded edges
(``t<replays>.annotations.json``). Needs CUDA; without it, says so and exits 2.
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--layers", type=int, default=36)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("record_export_trace: needs a CUDA GPU", file=sys.stderr)
        return 2
    from blocks import capture, decoder, decoder_weights
    from export_pace import _profile
    from perfetto_graph_ann.annotations.files import save_annotations
    from perfetto_graph_ann.capture.recorded import recorded_annotations

    g, _ = capture(decoder(decoder_weights(args.layers)))
    g.replay()  # calibration, outside the profiler
    torch.cuda.synchronize()
    _profile(torch, g, 2)
    prof = _profile(torch, g, args.replays)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "t.json")
        prof.export_chrome_trace(src)
        with open(src, "rb") as f, gzip.open(os.path.join(args.out, f"t{args.replays}.json.gz"), "wb") as z:
            z.write(f.read())
    save_annotations(os.path.join(args.out, f"t{args.replays}.annotations.json"), recorded_annotations())
    return 0


if __name__ == "__main__":
    sys.exit(main())
