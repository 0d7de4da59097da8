"""Benchmark: ``pga.diff`` of two fleets of ranks (issue 35, item 1), against the same pairs
diffed one by one with the one-rank form.

Each rank is ``benchmarks/sql.py``'s synthetic trace (20-node graph replays) with its own
seed, written as ``rank<r>.pftrace`` into a base and a new folder (not timed). ``--mode fleet``
times ``pga.diff(base_dir, new_dir)`` (each trace loaded alone, rank by rank); ``--mode pairs``
times one ``pga.diff(base_r, new_r)`` per rank (each pair merged into one session). Run each
mode in its own process: the peak RSS (VmHWM) printed is the process's, the builds included.

    python benchmarks/diff_fleet.py --mode fleet [--ranks 8] [--kernels 100000]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diff import peak_rss_mb  # noqa: E402
from sql import build  # noqa: E402

import perfetto_graph_ann as pga  # noqa: E402
from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("fleet", "pairs"), default="fleet")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=100_000)
    ap.add_argument("--engine", default="portable")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pga-bench-diff-fleet-") as tmp:
        dirs = {side: Path(tmp) / side for side in ("base", "new")}
        for i, (side, d) in enumerate(dirs.items()):
            d.mkdir()
            for r in range(args.ranks):
                trace, layout = build(args.kernels, 1 + r + 1000 * i)
                convert(trace, d / f"rank{r}.pftrace", ConvertConfig(progress=False), layout=layout)
                del trace, layout
        size = sum(p.stat().st_size for d in dirs.values() for p in d.iterdir()) / 1e6
        print(f"inputs: 2 x {args.ranks} ranks, {args.kernels:,} GPU work events each, {size:.0f} MB; "
              f"peak RSS so far {peak_rss_mb():.0f} MB")
        t = time.perf_counter()
        if args.mode == "fleet":
            df = pga.diff(dirs["base"], dirs["new"], engine=args.engine)
            rows = len(df)
        else:
            rows = sum(len(pga.diff(dirs["base"] / f"rank{r}.pftrace", dirs["new"] / f"rank{r}.pftrace",
                                    engine=args.engine)) for r in range(args.ranks))
        wall = time.perf_counter() - t
        print(f"{args.mode}: {wall:.1f} s wall, {rows} rows; peak RSS {peak_rss_mb():.0f} MB (the builds' included)")


if __name__ == "__main__":
    main()
