"""`perfetto-graph-ann demo`: the tutorial end to end, live on CUDA or on the shipped H200 recordings."""
from __future__ import annotations

import argparse

from . import options
from ._common import positive_int

__all__ = ["register", "run"]


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "demo",
        help="run the tutorial end to end (live with CUDA, else on the bundled H200 recordings)",
        description="With CUDA: capture the tutorial's three scenarios with this package's API "
        "(transformer block with mark_kernels, two-branch mark_stream block, and with 2+ GPUs a "
        "2-rank all_reduce step), profile 5 replays each, and export them. Without CUDA: the same "
        "from the real H200 recordings shipped in the package. Prints the kernels-per-lane table "
        "before/after, the join report and the SQL lane summary; writes raw and annotated .pftrace "
        "files and summary.json to --out.",
        parents=[options.engine(), options.no_sql()],
    )
    p.add_argument("--out", default="demo_out", metavar="DIR", help="output folder (default: demo_out)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--shipped", dest="mode", action="store_const", const="shipped",
                      help="use the shipped H200 recordings even when CUDA is available")
    mode.add_argument("--live", dest="mode", action="store_const", const="live",
                      help="require a live capture (error without CUDA)")
    p.add_argument("--replays", type=positive_int, default=5, help="profiled replays per scenario, live only (default: 5)")
    p.set_defaults(func=run, mode="auto")
    return p


def run(args: argparse.Namespace) -> int:
    from ..demo.runner import DemoConfig, run_demo

    run_demo(DemoConfig(out_dir=args.out, mode=args.mode, replays=args.replays, engine=args.engine,
                        sql=not args.no_sql))
    return 0
