"""``perfetto-graph-ann lanes TRACE [--annotations A] [--graph-lanes all|none]``.

Prints GPU work per lane before and after the join, the join report, and (when a
converter and a trace processor are available) the graph_ann SQL lane summary of
the annotated trace.
"""
from __future__ import annotations

import argparse
import contextlib
import sys

from . import options
from ._common import hint_annotations, print_join_summary

__all__ = ["register", "run", "SQL_COLUMNS"]


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("lanes", help="kernels per lane before/after the join, and the join report",
                       description=__doc__.split("\n\n")[1],
                       parents=[*options.join(), options.no_sql(), options.engine(), options.verbosity()])
    p.add_argument("trace", help="torch.profiler trace (.json or .json.gz)")
    p.set_defaults(func=run)
    return p


#: Columns of the SQL lane summary the table shows (all of them with --format csv in `sql`).
SQL_COLUMNS = ["device", "lane_id", "lane_name", "work_count", "busy_dur", "utilization", "replay_utilization",
               "mean_dur", "p50_dur", "p90_dur", "p99_dur", "max_dur", "first_ts", "end_ts"]


def run(args: argparse.Namespace, out=None) -> int:
    from ..util.collector import paused_gc
    from ._common import command_progress

    # The read trace lives until the command ends: the collector would only walk it over
    # and over (seconds on 1M events); it runs again once _run has freed it.
    with command_progress("lanes", options.progress_off(args)) as progress, paused_gc():
        return _run(args, out or sys.stdout, progress)


def _run(args: argparse.Namespace, out, progress) -> int:
    from ..annotations.model import AnnotationSet
    from ..join.summary import lane_table, report_table
    from ..pipeline.joined import check_lane_options, read_and_join

    quiet = getattr(args, "quiet", False)
    check_lane_options(args.trace, args.annotations, args.graph_lanes)
    # without files, a join with no annotations: its layout still names the lanes and streams
    joined = read_and_join(args.trace, args.annotations or AnnotationSet(), graph_lanes=args.graph_lanes,
                           force=args.force_annotations, progress=progress)
    trace, layout, annotations = joined.trace, joined.layout, joined.annotations
    if args.annotations and not quiet:
        print_join_summary(layout.report)
    names = None
    graph_lanes = layout.graph_lanes
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
    if not quiet:
        hint_annotations(layout.report, args.annotations)
    if not args.no_sql:
        _sql_summary(args, trace, layout, out, progress)
    return 0


def _sql_summary(args, trace, layout, out, progress) -> None:
    """The SQL lane summary of the annotated trace; a note instead when it cannot run here."""
    from ..errors import EngineError
    from ..query.includes import include_modules
    from ..query.metrics import METRICS, lane_summary
    from ..pipeline.query import open_converted
    from .tables import render, trace_start_ns

    try:
        with contextlib.ExitStack() as stack:
            with progress.phase("converting and loading into the trace processor"):
                session = stack.enter_context(open_converted(trace, layout, engine=args.engine, sql_args_only=True))
            include_modules(session, [METRICS["lane_summary"].module], progress)
            df = lane_summary(session)
            start = trace_start_ns(session)
    except EngineError as e:
        progress.close()
        print(f"\n(SQL lane summary skipped: {e})", file=out)
        return
    progress.close()
    print("\nSQL lane summary (graph_ann.lanes)", file=out)
    print(render(df, trace_start=start, columns=SQL_COLUMNS).rstrip("\n") if not df.empty
          else "  (no GPU work in this trace)", file=out)
