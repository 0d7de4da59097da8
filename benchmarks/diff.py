"""Benchmark: ``pga.diff`` of two runs with 1M GPU kernels each (issue 35's "diff of two
1M-kernel traces"), on the portable engine.

The two runs are ``benchmarks/sql.py``'s synthetic trace (20-node graph replays: NCCL, mlp and
attention lanes, a memcpy, a memset) built with two seeds, so every kernel's time differs a
little between them; written as ``.pftrace`` first (not timed). Prints the wall time of the
diff, its phases (the progress lines) and the process's peak RSS (VmHWM).

    python benchmarks/diff.py [--kernels 1000000]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sql import build  # noqa: E402

import perfetto_graph_ann as pga  # noqa: E402
from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert  # noqa: E402


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pga-bench-diff-") as tmp:
        paths = []
        for seed in (1, 2):
            trace, layout = build(args.kernels, seed)
            p = Path(tmp) / f"run{seed}.pftrace"
            convert(trace, p, ConvertConfig(progress=False), layout=layout)
            paths.append(p)
            del trace, layout
        print(f"inputs: {args.kernels:,} GPU work events each, "
              f"{sum(p.stat().st_size for p in paths) / 1e6:.0f} MB; peak RSS so far {peak_rss_mb():.0f} MB")
        t = time.perf_counter()
        df = pga.diff(paths[0], paths[1])
        wall = time.perf_counter() - t
        print(f"diff: {wall:.1f} s wall, {len(df)} rows, real differences: {int(df['rank'].notna().sum())}; "
              f"peak RSS {peak_rss_mb():.0f} MB (the builds' included)")


if __name__ == "__main__":
    main()
