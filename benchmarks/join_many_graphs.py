"""Benchmark (issue 33): the join when the annotations hold many graphs, as a serving engine
captures one graph per batch size.

    python benchmarks/join_many_graphs.py [--graphs 32] [--events 20000] [--repeat 3]

The annotated seed-block recording repeated (``benchmarks/synth.py``) is joined with its capture
record plus ``--graphs - 1`` other graphs of the same kernels on other grids (as another batch
size launches them), so every replay is tried against every graph when its candidates are
listed and fits only its own.
Prints the best CPU time of the join and a digest of its placements (lane and args of every
placed event), to compare revisions: run it with ``PYTHONPATH`` at each.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth import dumps, make_trace  # noqa: E402

from perfetto_graph_ann._resources import demo_data_dir  # noqa: E402
from perfetto_graph_ann.annotations.capture_record import read_capture_record  # noqa: E402
from perfetto_graph_ann.join import join  # noqa: E402
from perfetto_graph_ann.read.kineto import parse_trace_bytes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphs", type=int, default=32)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    gc.disable()
    ann = read_capture_record(demo_data_dir() / "seed_block_annotated.capture.json")
    g0 = ann.graphs[0]
    others = []
    for k in range(1, args.graphs):  # another batch size: the same kernels on other grids
        nodes = tuple(dataclasses.replace(n, key=n.key + k * 1000,
                                          grid=(n.grid[0] + k, *n.grid[1:]) if n.grid else n.grid)
                      for n in g0.nodes)
        others.append(dataclasses.replace(g0, exec_id=g0.exec_id + 1000 * k, nodes=nodes))
    ann = dataclasses.replace(ann, graphs=(g0, *others))
    trace = parse_trace_bytes(dumps(make_trace(args.events, fixtures=("seed_block_annotated",))))
    best, layout = float("inf"), None
    for _ in range(args.repeat):
        t = time.process_time()
        layout = join(trace, ann, "all")
        best = min(best, time.process_time() - t)
    digest = hashlib.sha256(repr(sorted((k, v.lane, sorted(v.args.items(), key=str))
                                        for k, v in layout.placements.items())).encode()).hexdigest()[:16]
    print(f"join of {len(trace.events):,} events with {len(ann.graphs)} graphs: {best:.3f} s CPU (best of "
          f"{args.repeat}); {layout.report.total:,} graphed events, {layout.report.unmatched} unmatched; "
          f"placements {digest}")


if __name__ == "__main__":
    main()
