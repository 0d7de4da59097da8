"""``perfetto-graph-ann sql TRACE "SELECT ..."``: run PerfettoSQL on a trace and print it.

The ``graph_ann`` package is registered, so ``INCLUDE PERFETTO MODULE graph_ann.<module>;``
works in the query. Output: a readable table (default: durations in µs / ms, timestamps from the
trace start, ratios in %, fitted to the terminal), or CSV / JSON (a list of row objects) with
the exact raw values. A torch.profiler JSON trace given with ``--annotations`` is joined to
them first (as ``report``).
"""
from __future__ import annotations

import argparse
from typing import Optional

from ._common import (ENGINES, GRAPH_LANES_HELP, add_force_option, note_annotations_ignored, open_session,
                      positive_seconds, read_and_join, run_text_command)
from .tables import trace_start_ns


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sql",
        help="run PerfettoSQL on a trace (graph_ann modules available)",
        description="Run PerfettoSQL on a trace in a trace processor (native shell or the portable "
        "WebAssembly engine) with the graph_ann SQL package registered.",
    )
    p.add_argument("trace", help="trace file (.pftrace, Chrome JSON, .gz, anything Perfetto reads)")
    p.add_argument("sql", help='SQL; several statements allowed, e.g. "INCLUDE PERFETTO MODULE graph_ann.lanes; SELECT ..."')
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table (default): readable (durations in µs/ms, timestamps from the trace start, ratios "
                   "in %%, fitted to the terminal); csv / json: exact raw values")
    p.add_argument("--engine", choices=ENGINES, default="auto", help="trace processor to use (default: auto)")
    p.add_argument("--timeout", type=positive_seconds, default=None, metavar="S", help="stop the query after S seconds")
    p.add_argument("-o", "--output", default=None, help="write to this file (atomically) instead of stdout")
    p.add_argument("--annotations", "-a", action="append", default=[], metavar="FILE",
                   help="for a JSON trace: annotation sidecar or capture record to join first (repeatable)")
    p.add_argument("--graph-lanes", choices=("all", "none"), default=None,
                   help="for a JSON trace with --annotations: " + GRAPH_LANES_HELP)
    add_force_option(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)
    return p


def format_frame(df, fmt: str, trace_start: Optional[int] = None) -> str:
    """Render a DataFrame as ``table`` (readable: see :mod:`.tables`), ``csv`` or ``json``
    (exact raw values) text, ending with a newline."""
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        return df.to_json(orient="records", force_ascii=False) + "\n"
    from .tables import render

    return render(df, trace_start=trace_start, count=True, null="NULL")


def run(args: argparse.Namespace) -> int:
    return run_text_command("sql", args, _query)


def _query(args: argparse.Namespace, progress) -> str:
    import contextlib
    import os

    from ..util.atomic import refuse_input_as_output
    from ..formats import is_json_trace

    refuse_input_as_output(args.output, [args.trace, *args.annotations])
    note_annotations_ignored("sql", args.trace, args.annotations)
    with contextlib.ExitStack() as stack:
        with progress.phase(f"loading {os.path.basename(args.trace)} into the trace processor"):
            from ..query.engine import EngineConfig

            config = EngineConfig(engine=args.engine, query_timeout_s=args.timeout)
            joined = None
            if args.annotations and is_json_trace(args.trace):
                joined = read_and_join(args.trace, args.annotations, args.graph_lanes, args.force_annotations)
            session = open_session(stack, args.trace, joined, engine=args.engine, config=config)
        from ..query.includes import include_modules, split_includes

        if progress.enabled:  # each included module on its own, to say which one runs
            include_modules(session, split_includes(args.sql)[0], progress, timeout_s=args.timeout)
        with progress.phase("running the query"):
            df = session.query(args.sql).df()
        start = trace_start_ns(session) if args.format == "table" else None
    return format_frame(df, args.format, start)
