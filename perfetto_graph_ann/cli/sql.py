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

from . import options
from ._common import (note_annotations_ignored, open_session, positive_seconds, print_join_summary,
                      run_text_command)
from .tables import trace_start_ns


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sql",
        help="run PerfettoSQL on a trace (graph_ann modules available)",
        description="Run PerfettoSQL on a trace in a trace processor (native shell or the portable "
        "WebAssembly engine) with the graph_ann SQL package registered.",
        parents=[options.text_format(), options.engine(), options.text_output(), *options.join(json_only=True),
                 options.quiet()],
    )
    p.add_argument("trace", help="trace file (.pftrace, Chrome JSON, .gz, anything Perfetto reads)")
    p.add_argument("sql", help='SQL; several statements allowed, e.g. "INCLUDE PERFETTO MODULE graph_ann.lanes; SELECT ..."')
    p.add_argument("--timeout", type=positive_seconds, default=None, metavar="S", help="stop the query after S seconds")
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
            if args.annotations and is_json_trace(args.trace):
                from ..pipeline.query import open_json

                session = stack.enter_context(open_json(
                    args.trace, args.annotations, args.graph_lanes, args.force_annotations, engine=args.engine,
                    config=config, on_join=lambda layout: print_join_summary(layout.report)))
            else:
                session = open_session(stack, args.trace, engine=args.engine, config=config)
        from ..query.includes import include_modules, split_includes

        if progress.enabled:  # each included module on its own, to say which one runs
            include_modules(session, split_includes(args.sql)[0], progress, timeout_s=args.timeout)
        with progress.phase("running the query"):
            df = session.query(args.sql).df()
        start = trace_start_ns(session) if args.format == "table" else None
    return format_frame(df, args.format, start)
