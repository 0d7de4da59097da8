"""``perfetto-graph-ann sql TRACE "SELECT ..."``: run PerfettoSQL on a trace and print it.

The ``graph_ann`` package is registered, so ``INCLUDE PERFETTO MODULE graph_ann.<module>;``
works in the query. Output: an aligned table (default), CSV or JSON (a list of row objects).
A torch.profiler JSON trace given with ``--annotations`` is joined to them first (as ``report``).
"""
from __future__ import annotations

import argparse

from ._common import ENGINES, GRAPH_LANES_HELP, add_force_option, positive_seconds, read_and_join, write_output


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sql",
        help="run PerfettoSQL on a trace (graph_ann modules available)",
        description="Run PerfettoSQL on a trace in a trace processor (native shell or the portable "
        "WebAssembly engine) with the graph_ann SQL package registered.",
    )
    p.add_argument("trace", help="trace file (.pftrace, Chrome JSON, .gz, anything Perfetto reads)")
    p.add_argument("sql", help='SQL; several statements allowed, e.g. "INCLUDE PERFETTO MODULE graph_ann.lanes; SELECT ..."')
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format (default: table)")
    p.add_argument("--engine", choices=ENGINES, default="auto", help="trace processor to use (default: auto)")
    p.add_argument("--timeout", type=positive_seconds, default=None, metavar="S", help="stop the query after S seconds")
    p.add_argument("-o", "--output", default=None, help="write to this file (atomically) instead of stdout")
    p.add_argument("--annotations", "-a", action="append", default=[], metavar="FILE",
                   help="for a JSON trace: annotation sidecar or capture record to join first (repeatable)")
    p.add_argument("--graph-lanes", choices=("all", "none"), default=None,
                   help="for a JSON trace with --annotations: " + GRAPH_LANES_HELP)
    add_force_option(p)
    p.set_defaults(func=run)
    return p


def format_frame(df, fmt: str) -> str:
    """Render a DataFrame as ``table``, ``csv`` or ``json`` text (ends with a newline)."""
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        return df.to_json(orient="records", force_ascii=False) + "\n"
    return _table(df)


def _table(df) -> str:
    """Aligned columns: numbers right-aligned, text left-aligned, NULL shown as NULL."""
    import pandas as pd

    cols = [str(c) for c in df.columns]
    cells = [["NULL" if v is None or v is pd.NA or (isinstance(v, float) and pd.isna(v)) else str(v) for v in row] for row in df.itertuples(index=False, name=None)]
    numeric = [pd.api.types.is_numeric_dtype(df[c]) for c in df.columns]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]

    def line(values):
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    out = [line(cols), line(["-" * w for w in widths])] + [line(r) for r in cells]
    out.append(f"({len(cells)} row{'s' if len(cells) != 1 else ''})")
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    import sys

    from ..query.engine import EngineConfig
    from ..query.session import open_converted, open_trace
    from ..util.atomic import refuse_input_as_output
    from .report import is_json_trace

    refuse_input_as_output(args.output, [args.trace, *args.annotations])
    config = EngineConfig(engine=args.engine, query_timeout_s=args.timeout)
    if args.annotations and is_json_trace(args.trace):
        session = open_converted(*read_and_join(args.trace, args.annotations, args.graph_lanes,
                                                args.force_annotations), engine=args.engine, config=config)
    else:
        if args.annotations:
            print("perfetto-graph-ann sql: note: --annotations only apply to JSON traces; ignored", file=sys.stderr)
        session = open_trace(args.trace, engine=args.engine, config=config)
    with session as s:
        df = s.query(args.sql).df()
    text = format_frame(df, args.format)
    write_output(text, args.output)
    return 0
