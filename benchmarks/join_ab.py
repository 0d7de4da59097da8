"""A/B of the join (with the GPU projection) on the kernel-heavy trace of ``convert_ab.py``:
this checkout against a git revision, imported under another name, alternating, CPU time.

    python benchmarks/join_ab.py [--base HEAD] [--graph-events 100000] [--rounds 6]
"""
import argparse
import gc
import importlib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ap = argparse.ArgumentParser()
ap.add_argument("--base", default="HEAD")
ap.add_argument("--graph-events", type=int, default=100000)
ap.add_argument("--rounds", type=int, default=6)
opts = ap.parse_args()
from benchmarks.convert_ab import load_base  # noqa: E402
from benchmarks.synth import dumps, make_trace  # noqa: E402
from perfetto_graph_ann._resources import demo_data_dir  # noqa: E402
load_base(opts.base, Path(tempfile.mkdtemp()))
raw = dumps(make_trace(opts.graph_events, fixtures=("seed_block_annotated",)))
cap = demo_data_dir() / "seed_block_annotated.capture.json"
sides = {}
for name, pkg in (("base", "pga_base"), ("head", "perfetto_graph_ann")):
    kin = importlib.import_module(f"{pkg}.read.kineto"); jn = importlib.import_module(f"{pkg}.join.join")
    files = importlib.import_module(f"{pkg}.annotations.files")
    sides[name] = (kin, jn, files.load_annotations(cap))
best = {k: [] for k in sides}
for rnd in range(opts.rounds):
    for name in (("base", "head") if rnd % 2 == 0 else ("head", "base")):
        kin, jn, ann = sides[name]
        trace = kin.parse_trace_bytes(raw, "x.json")
        gc.disable(); t0 = time.process_time()
        layout = jn.join(trace, ann, graph_lanes="all")
        best[name].append(time.process_time() - t0); gc.enable()
        n = len(layout.ranges)
        del trace, layout
print(f"join of {opts.graph_events} graph events (seed_block_annotated, graph_lanes=all), CPU s over {opts.rounds} rounds:")
for k, v in best.items():
    print(f"  {k}: best {min(v):.3f}, median {sorted(v)[len(v) // 2]:.3f}")
print("projected ranges:", n)
