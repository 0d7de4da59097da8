"""What several subcommands share: loading annotation files, printing the join, writing output
(their shared options are declared in :mod:`.options`).

Reading, joining and converting are :mod:`perfetto_graph_ann.pipeline`'s.

Heavy imports stay inside the functions, so building the parser (``--help``) stays fast.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Callable, Dict, List, Optional, Sequence, Union

from .options import positive_int, positive_seconds, progress_off  # noqa: F401  (re-exported: older imports)

__all__ = ["command_progress", "csv_table_paths", "CsvTables", "discover_sidecars", "hint_annotations",
           "load_annotation_files", "note_annotations_ignored", "open_session", "positive_int", "positive_seconds",
           "print_join_summary", "progress_off", "Result", "run_text_command", "write_csv_tables", "write_output"]


def load_annotation_files(paths: Sequence[str]):
    """Merge the annotations of several files (sidecars or capture records)."""
    from ..annotations.files import load_annotation_files as load

    return load(paths)


def print_join_summary(report, file=None, prefix: str = "") -> None:
    """The one join summary every joining command prints (on stderr, so stdout keeps only the
    command's own output): one ``join:`` line, then ``warning:`` / ``note:`` lines."""
    from ..join.summary import summary_lines

    out = file or sys.stderr
    for line in summary_lines(report):
        print(f"{prefix}{line}", file=out)


def hint_annotations(report, annotation_paths: Sequence[str], out=None) -> None:
    """One hint line on stderr when no annotations were given but graph-launched GPU work
    stayed unmatched: the join needs the capture's sidecar to name those kernels' lanes."""
    if annotation_paths or not report.graphed or not report.unmatched:
        return
    print(f"hint: {report.unmatched} graph-launched GPU events have no annotations to join; pass the sidecar "
          "saved at capture (--annotations run.annotations.json, from pga.save_annotations) to give them "
          "their lanes", file=out or sys.stderr)


def command_progress(command: str, off: bool):
    """The progress line of ``command`` on stderr (off when ``off`` (see
    :func:`.options.progress_off`), not a TTY or switched off); a context manager that
    removes the line on leaving."""
    from ..util.progress import Progress, wanted

    return Progress(command, enabled=wanted(off))


#: What a command's body returns: one text, or (``--format csv``) named tables, one CSV file each.
Result = Union[str, "CsvTables"]


class CsvTables(dict):
    """Named DataFrames a command prints as CSV: one file per table with ``-o``, else one
    stream on stdout with a ``# <name>`` line before each table (and a note saying so).
    ``inputs``: the command's input files, which no output may overwrite."""

    def __init__(self, tables, inputs: Sequence[str] = ()):
        super().__init__(tables)
        self.inputs = list(inputs)


def run_text_command(command: str, args: argparse.Namespace, body: Callable[..., Result]) -> int:
    """Run a command whose result is one text (or :class:`CsvTables`): ``body(args, progress)``
    under the command's progress line (gone before the text is written), then the text to
    ``--output`` (saying ``wrote FILE`` unless ``-q``) or stdout."""
    with command_progress(command, progress_off(args)) as progress:
        result = body(args, progress)
    if isinstance(result, CsvTables):
        write_csv_tables(command, result, args.output, getattr(args, "quiet", False), result.inputs)
    else:
        write_output(result, args.output, getattr(args, "quiet", False))
    return 0


def csv_table_paths(output: str, names: Sequence[str]) -> Dict[str, str]:
    """Table name -> the CSV file ``-o output`` means for it: ``<output>.<name>.csv``, with a
    ``.csv`` ending of ``output`` dropped first (``-o report.csv`` -> ``report.lanes.csv``); an
    existing folder gets ``<folder>/<name>.csv``."""
    if os.path.isdir(output):
        return {n: os.path.join(output, f"{n}.csv") for n in names}
    stem = output[:-4] if output.lower().endswith(".csv") else output
    return {n: f"{stem}.{n}.csv" for n in names}


def write_csv_tables(command: str, tables: "CsvTables", output: Optional[str], quiet: bool = False,
                     inputs: Sequence[str] = ()) -> List[str]:
    """Several tables as CSV: one file per table (:func:`csv_table_paths`) when ``output`` is
    given, else one stream on stdout, each table after a ``# <name>`` line, with a note on
    stderr saying so. Returns the files written."""
    if not output:
        if not quiet and len(tables) > 1:
            print(f"perfetto-graph-ann {command}: note: {len(tables)} tables in one CSV stream, each after a "
                  "'# <table>' line; -o NAME.csv writes one file per table (NAME.<table>.csv)", file=sys.stderr)
        sys.stdout.write("".join(f"# {name}\n{df.to_csv(index=False)}" if len(tables) > 1 else df.to_csv(index=False)
                                 for name, df in tables.items()))
        return []
    from ..util.atomic import atomic_write_bytes, refuse_input_as_output

    paths = csv_table_paths(output, list(tables))
    for path in paths.values():
        refuse_input_as_output(path, list(inputs))
    for name, path in paths.items():
        atomic_write_bytes(path, tables[name].to_csv(index=False).encode("utf-8"))
    if not quiet:
        print(f"wrote {len(paths)} CSV files, one per table: {', '.join(paths.values())}")
    return list(paths.values())


def note_annotations_ignored(command: str, trace_path: str, annotation_paths: Sequence[str],
                             graph_lanes: Optional[str] = None, quiet: bool = False) -> None:
    """One note on stderr when join options were given with a trace they cannot apply to
    (only JSON traces are joined; a Perfetto trace is loaded as it is)."""
    from ..formats import is_json_trace

    given = [o for o, v in (("--annotations", annotation_paths), ("--graph-lanes", graph_lanes)) if v]
    if given and not is_json_trace(trace_path) and not quiet:
        print(f"perfetto-graph-ann {command}: note: {' and '.join(given)} only apply to JSON traces; ignored",
              file=sys.stderr)


def open_session(stack: contextlib.ExitStack, trace_path: str, engine: str = "auto", config=None):
    """A trace processor session entered on ``stack``: the trace file at ``trace_path`` loaded
    as it is (a JSON trace to convert first goes through ``pipeline.query.open_json``)."""
    from ..query.session import open_trace

    return stack.enter_context(open_trace(trace_path, engine=engine, config=config))


def write_output(text: str, output: Optional[str], quiet: bool = False) -> None:
    """Write ``text`` to ``output`` (atomically, UTF-8; then ``wrote FILE`` on stdout unless
    ``quiet``, as every command that writes a file says) or, when it is None, to stdout."""
    if output:
        from ..util.atomic import atomic_write_bytes

        atomic_write_bytes(output, text.encode("utf-8"))
        if not quiet:
            print(f"wrote {output}")
    else:
        sys.stdout.write(text)
def discover_sidecars(args: argparse.Namespace) -> None:
    """Where a joining command got no ``--annotations``, use the sidecars ``perfetto-graph-ann
    run`` saved beside its JSON traces (``<worker>.pga``, :func:`..formats.run_sidecar`), and
    say so on stderr. For several traces (``merge``) only when every trace has one."""
    if getattr(args, "annotations", None) != [] or not hasattr(args, "force_annotations"):
        return
    from ..formats import run_sidecar

    traces = getattr(args, "traces", None) or [getattr(args, "input", None) or getattr(args, "trace", None)]
    found = [run_sidecar(t) if t else None for t in traces]
    if not found or any(f is None for f in found):
        return
    args.annotations = found
    for t, f in zip(traces if not getattr(args, "quiet", False) else (), found):
        print(f"note: annotations: {f} (saved by perfetto-graph-ann run beside {os.path.basename(t)})",
              file=sys.stderr)
