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
from ._common import note_annotations_ignored, open_session, print_join_summary, run_text_command
from .tables import trace_start_ns

__all__ = ["format_frame", "register", "run"]


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sql",
        help="run PerfettoSQL on a trace (graph_ann modules available)",
        description="Run PerfettoSQL on a trace in a trace processor (native shell or the portable "
        "WebAssembly engine) with the graph_ann SQL package registered.",
        parents=[options.text_format(), options.engine(), options.text_output(), *options.join(json_only=True),
                 options.verbosity(),
                 options.timeout("stop after this many seconds, counted from the start: loading (and, for a JSON "
                                 "trace with --annotations, joining and converting) included")],
    )
    p.add_argument("trace", help="trace file (.pftrace, Chrome JSON, .gz, anything Perfetto reads)")
    p.add_argument("sql", help='SQL; several statements allowed, e.g. "INCLUDE PERFETTO MODULE graph_ann.lanes; SELECT ..."')
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


class _Deadline:
    """``--timeout`` as one budget for the whole command: the load gets all of it, each query
    what is left (a load that used it up stops the command before any query)."""

    def __init__(self, seconds: Optional[float], trace: str):
        import time

        self.seconds, self.trace = seconds, trace
        self.start = time.monotonic()

    def expired(self) -> bool:
        import time

        return self.seconds is not None and time.monotonic() - self.start >= self.seconds

    def left(self) -> Optional[float]:
        """Seconds left, None without a timeout; raises QueryTimeoutError when none are."""
        import time

        if self.seconds is None:
            return None
        used = time.monotonic() - self.start
        if used >= self.seconds:
            from ..errors import QueryTimeoutError

            raise QueryTimeoutError(f"{self.trace}: ran past its --timeout of {self.seconds:g} s before the query "
                                    f"ran ({used:.1f} s loading the trace); the trace processor was stopped")
        return self.seconds - used


def _query(args: argparse.Namespace, progress) -> str:
    import contextlib
    import os

    from ..errors import GraphAnnError, QueryTimeoutError
    from ..util.atomic import refuse_input_as_output
    from ..formats import is_json_trace

    deadline = _Deadline(args.timeout, args.trace)
    refuse_input_as_output(args.output, [args.trace, *args.annotations])
    note_annotations_ignored("sql", args.trace, args.annotations, args.graph_lanes, args.quiet)
    json_trace = is_json_trace(args.trace)
    if json_trace:
        from ..pipeline.convert import check_lane_options

        check_lane_options(args.trace, args.annotations, args.graph_lanes)
    with contextlib.ExitStack() as stack:
        with progress.phase(f"loading {os.path.basename(args.trace)} into the trace processor"):
            from ..query.engine import EngineConfig

            config = EngineConfig(engine=args.engine, load_timeout_s=args.timeout)
            if args.timeout is not None:  # the engine's start-up is part of the budget too
                config = config.replace(start_timeout_s=min(config.start_timeout_s, args.timeout))
            try:
                if args.annotations and json_trace:
                    from ..pipeline.query import open_json

                    session = stack.enter_context(open_json(
                        args.trace, args.annotations, args.graph_lanes, args.force_annotations, engine=args.engine,
                        config=config,
                        on_join=None if args.quiet else lambda layout: print_join_summary(layout.report)))
                else:
                    session = open_session(stack, args.trace, engine=args.engine, config=config)
            except GraphAnnError as e:
                if not deadline.expired():
                    raise
                raise QueryTimeoutError(f"{args.trace}: ran past its --timeout of {args.timeout:g} s while the "
                                        "trace processor started and loaded the trace; it was stopped") from e
        from ..query.includes import include_modules, split_includes

        try:
            if progress.enabled:  # each included module on its own, to say which one runs
                for module in split_includes(args.sql)[0]:
                    include_modules(session, [module], progress, timeout_s=deadline.left())
            with progress.phase("running the query"):
                df = session.query(args.sql, timeout_s=deadline.left()).df()
        except QueryTimeoutError as e:
            if args.timeout is None or not deadline.expired():
                raise
            sql_line = "".join("\n" + line for line in str(e).splitlines()[1:])
            raise QueryTimeoutError(f"{args.trace}: ran past its --timeout of {args.timeout:g} s (the query was "
                                    f"still running); the {session.engine.kind} trace processor was stopped"
                                    f"{sql_line}") from e
        start = trace_start_ns(session) if args.format == "table" else None
    return format_frame(df, args.format, start)
