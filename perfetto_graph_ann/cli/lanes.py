"""``perfetto-graph-ann lanes TRACE [--annotations A] [--graph-lanes all|none]``.

Prints GPU work per lane before and after the join, the join report, and (when a
converter and a trace processor are available) the graph_ann SQL lane summary of
the annotated trace.
"""
from __future__ import annotations

import argparse
import sys

from ._common import ENGINES, GRAPH_LANES_HELP, add_force_option, join_files, print_join_summary


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("lanes", help="kernels per lane before/after the join, and the join report",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("trace", help="torch.profiler trace (.json or .json.gz)")
    p.add_argument("--annotations", "-a", action="append", default=[], metavar="FILE",
                   help="annotation sidecar or capture record (repeatable; merged)")
    p.add_argument("--graph-lanes", choices=("all", "none"), default=None, help=GRAPH_LANES_HELP)
    add_force_option(p)
    p.add_argument("--no-sql", action="store_true", help="skip the SQL lane summary (needs a trace processor)")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="trace processor for the SQL lane summary")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, out=None) -> int:
    from ..join.summary import lane_table, report_table
    from ..read.kineto import read_trace

    out = out or sys.stdout
    trace = read_trace(args.trace)
    layout, annotations = join_files(trace, args.annotations, args.graph_lanes, args.force_annotations)
    if args.annotations:
        print_join_summary(layout.report)
    names = None
    if graph_lanes == "none":  # name the annotated lanes the table lists next to the streams
        from ..join.lanes import lane_graphs, lane_name
        from ..join.model import DEFAULT_GRAPH_LANE

        names = {key: lane_name(key[1], annotations, graphs)
                 for key, graphs in lane_graphs(trace.events, layout.placements, annotated=True).items()
                 if key[1] != DEFAULT_GRAPH_LANE}
    table = lane_table(trace, layout, names)
    print(f"{args.trace}: GPU work per lane (graph_lanes={graph_lanes})", file=out)
    if table.empty:
        print("  (no GPU work in this trace)", file=out)
    for device, rows in table.groupby("device", sort=True):
        print(f"GPU {device}", file=out)
        print(rows.drop(columns=["device"]).to_string(index=False), file=out)
    print("", file=out)
    print(report_table(layout).to_string(index=False), file=out)
    if not args.no_sql:
        _sql_summary(args, trace, layout, out)
    return 0


def _sql_summary(args, trace, layout, out) -> None:
    """The SQL lane summary of the annotated trace; a note instead when it cannot run here."""
    from ..errors import EngineError
    from ..query.metrics import lane_summary
    from ..query.session import open_converted

    try:
        with open_converted(trace, layout, engine=args.engine) as session:
            df = lane_summary(session)
    except EngineError as e:
        print(f"\n(SQL lane summary skipped: {e})", file=out)
        return
    print("\nSQL lane summary (graph_ann.lanes)", file=out)
    print(df.to_string(index=False) if not df.empty else "  (no GPU work in this trace)", file=out)
