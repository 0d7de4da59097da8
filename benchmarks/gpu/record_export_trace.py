"""GPU helper (issue 33): record the trace ``benchmarks/export_loops_ab.py`` reads on a CPU machine.

    python benchmarks/gpu/record_export_trace.py OUT_DIR [--replays 100] [--layers 36] [--after N] [--cprofile]
        [--model toy|hf-llama]

The 36-layer decoder of ``export_pace.py`` captured with ``pga.graph`` and calibrated, then one
profile of ``--replays`` replays: its Chrome JSON gzip-compressed (``t<replays>.json.gz``, what
``pga.export`` parses) and the process's annotations with its replay record and recorded edges
(``t<replays>.annotations.json``). ``--after N``: N profiles of 100 replays first (exported by
torch, dropped), as late in a process that profiled before. ``--cprofile``: then one more profile
of ``--replays`` exported by ``pga.export`` under cProfile (``t<replays>.cprofile.txt``: the
top functions by cumulative and by own time), and three more timed against torch's export of a
profile of their own. ``--model hf-llama``: transformers' Llama instead of the decoder (the
machine's transformers), every module scoped by ``pga.mark_modules``. Needs CUDA; without it,
says so and exits 2.
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
    ap.add_argument("--after", type=int, default=0, help="profiles of 100 replays before the recorded one")
    ap.add_argument("--cprofile", action="store_true", help="pga.export of one more profile under cProfile")
    ap.add_argument("--model", choices=["toy", "hf-llama"], default="toy",
                    help="hf-llama: transformers' LlamaForCausalLM (module_capture.py's), its modules scoped")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("record_export_trace: needs a CUDA GPU", file=sys.stderr)
        return 2
    from blocks import capture, decoder, decoder_weights
    from export_pace import _profile
    from perfetto_graph_ann.annotations.files import save_annotations
    from perfetto_graph_ann.capture.recorded import recorded_annotations

    fwd = decoder(decoder_weights(args.layers)) if args.model == "toy" else _hf_llama(torch, args.layers)
    g, _ = capture(fwd)  # fwd (and its model) held until the end
    g.replay()  # calibration, outside the profiler
    torch.cuda.synchronize()
    _profile(torch, g, 2)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.after):
            _profile(torch, g, 100).export_chrome_trace(os.path.join(tmp, "earlier.json"))
        prof = _profile(torch, g, args.replays)
        src = os.path.join(tmp, "t.json")
        prof.export_chrome_trace(src)
        with open(src, "rb") as f, gzip.open(os.path.join(args.out, f"t{args.replays}.json.gz"), "wb") as z:
            z.write(f.read())
        save_annotations(os.path.join(args.out, f"t{args.replays}.annotations.json"), recorded_annotations())
        if args.cprofile:
            _profiled_exports(torch, g, args.replays, tmp, os.path.join(args.out, f"t{args.replays}.cprofile.txt"))
    return 0


def _hf_llama(torch, layers: int):
    """transformers' Llama of ``module_capture.py`` (``hf_llama_model``, batch 16 x 128 tokens),
    its modules scoped by ``pga.mark_modules``: a forward to capture."""
    from module_capture import hf_llama_model

    import perfetto_graph_ann as pga

    model, ids = hf_llama_model(layers, 16)
    pga.mark_modules(model)

    def fwd():
        with torch.no_grad():
            return model(ids).logits

    fwd.model = model
    return fwd


def _profiled_exports(torch, g, replays: int, tmp: str, report: str) -> None:
    import cProfile
    import io
    import pstats
    import time

    from export_pace import _profile

    import perfetto_graph_ann as pga

    pr = cProfile.Profile()
    prof = _profile(torch, g, replays)
    pr.enable()
    pga.export(prof, os.path.join(tmp, "p.pftrace"), graph_lanes="all")
    pr.disable()
    text = io.StringIO()
    pstats.Stats(pr, stream=text).sort_stats("cumulative").print_stats(45)
    pstats.Stats(pr, stream=text).sort_stats("tottime").print_stats(30)
    with open(report, "w") as f:
        f.write(text.getvalue())
    for _ in range(3):
        prof = _profile(torch, g, replays)
        t = time.perf_counter()
        pga.export(prof, os.path.join(tmp, "p.pftrace"), graph_lanes="all")
        ours = time.perf_counter() - t
        prof = _profile(torch, g, replays)
        t = time.perf_counter()
        prof.export_chrome_trace(os.path.join(tmp, "t2.json"))
        theirs = time.perf_counter() - t
        print(f"{replays} replays: pga.export {ours:.3f} s, torch's export {theirs:.3f} s, {ours / theirs:.2f}x",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
