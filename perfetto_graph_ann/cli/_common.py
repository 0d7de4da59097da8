"""What several subcommands share: loading annotation files, printing the join, writing output
(their shared options are declared in :mod:`.options`).

Reading, joining and converting are :mod:`perfetto_graph_ann.pipeline`'s.

Heavy imports stay inside the functions, so building the parser (``--help``) stays fast.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from typing import Callable, Optional, Sequence


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


def command_progress(command: str, quiet: bool):
    """The progress line of ``command`` on stderr (off when ``quiet``, not a TTY or switched
    off); a context manager that removes the line on leaving."""
    from ..util.progress import Progress, wanted

    return Progress(command, enabled=wanted(quiet))


def run_text_command(command: str, args: argparse.Namespace, body: Callable[..., str]) -> int:
    """Run a command whose result is one text: ``body(args, progress)`` under the command's
    progress line (gone before the text is written), then the text to ``--output`` or stdout."""
    with command_progress(command, args.quiet) as progress:
        text = body(args, progress)
    write_output(text, args.output)
    return 0


def note_annotations_ignored(command: str, trace_path: str, annotation_paths: Sequence[str]) -> None:
    """One note on stderr when ``--annotations`` were given with a trace they cannot apply to
    (only JSON traces are joined; a Perfetto trace is loaded as it is)."""
    from ..formats import is_json_trace

    if annotation_paths and not is_json_trace(trace_path):
        print(f"perfetto-graph-ann {command}: note: --annotations only apply to JSON traces; ignored",
              file=sys.stderr)


def open_session(stack: contextlib.ExitStack, trace_path: str, engine: str = "auto", config=None):
    """A trace processor session entered on ``stack``: the trace file at ``trace_path`` loaded
    as it is (a JSON trace to convert first goes through ``pipeline.query.open_json``)."""
    from ..query.session import open_trace

    return stack.enter_context(open_trace(trace_path, engine=engine, config=config))


def write_output(text: str, output: Optional[str]) -> None:
    """Write ``text`` to ``output`` (atomically, UTF-8) or, when it is None, to stdout."""
    if output:
        from ..util.atomic import atomic_write_bytes

        atomic_write_bytes(output, text.encode("utf-8"))
    else:
        sys.stdout.write(text)


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds above 0 (0, negative, nan and inf are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number of seconds above 0")
    return value


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
    for t, f in zip(traces, found):
        print(f"note: annotations: {f} (saved by perfetto-graph-ann run beside {os.path.basename(t)})",
              file=sys.stderr)
