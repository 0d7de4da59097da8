"""``perfetto-graph-ann sql TRACE "SELECT ..."``: run PerfettoSQL on a trace and print it.

The ``graph_ann`` package is registered, so ``INCLUDE PERFETTO MODULE graph_ann.<module>;``
works in the query. Output: an aligned table (default), CSV or JSON (a list of row objects).
"""
from __future__ import annotations

import argparse

from ._common import ENGINES, positive_seconds, write_output


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
    from ..query.engine import EngineConfig
    from ..query.session import open_trace
    from ..util.atomic import refuse_input_as_output

    refuse_input_as_output(args.output, [args.trace])
    config = EngineConfig(engine=args.engine, query_timeout_s=args.timeout)
    with open_trace(args.trace, engine=args.engine, config=config) as session:
        df = session.query(args.sql).df()
    text = format_frame(df, args.format)
    write_output(text, args.output)
    return 0
