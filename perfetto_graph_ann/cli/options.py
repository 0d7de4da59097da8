"""The options several subcommands share, each declared once, as argparse parent parsers.

A subcommand names the parents it takes::

    sub.add_parser("report", parents=[*options.join(json_only=True), options.engine(), options.verbosity()])

Each function returns a fresh parent (``add_help=False``): the flags, metavar, default and
help of an option are written here only. Where an option's meaning differs by command (the
``--graph-lanes`` default, ``--annotations`` given once per trace) the function takes that
difference as an argument, and the rest of its declaration stays shared.
"""
from __future__ import annotations

import argparse
import math
import sys
from typing import List, Optional, Sequence

__all__ = ["annotations", "ANNOTATIONS_HELP", "default_stream", "engine", "ENGINES", "force_annotations", "FORCE_HELP",
           "graph_lanes", "GRAPH_LANES_DEFAULT_HELP", "GRAPH_LANES_HELP", "gzip", "join", "JSON_ONLY", "lane_id",
           "NO_PROGRESS_HELP", "no_sql", "PER_TRACE_HELP", "positive_int", "positive_seconds", "progress_off",
           "QUIET_HELP", "text_format", "text_output", "timeout", "top", "trace_output", "verbosity"]

#: ``--engine`` choices: ``query.engine.config.ENGINES``, repeated so that building the parser
#: does not import the engine package (tests/test_package.py checks they agree).
ENGINES = ("auto", "native", "portable")

#: What ``--annotations`` takes, on every command that joins.
ANNOTATIONS_HELP = "annotation sidecar or capture record to join (repeatable; merged)"
#: ``--annotations`` on commands that take one file per trace.
PER_TRACE_HELP = "annotation sidecar or capture record of each trace: once per trace, in order"
#: ``--graph-lanes`` choices and meaning (the default is said per command).
GRAPH_LANES_HELP = ("with --annotations: all moves graphed kernels to their annotated lanes; none keeps the "
                    "recorded streams (torch 2.15's default)")
#: The ``--graph-lanes`` default of the commands that join one trace.
GRAPH_LANES_DEFAULT_HELP = "default: all when a node is annotated, else none; all needs annotated nodes, as in torch"
#: ``--force-annotations`` help, the same on every command that joins.
FORCE_HELP = ("join the annotations even if they do not belong to the trace (their capture identity "
              "differs, or they match none of its graph replays); the join summary says what was overridden")
#: Prefix of the join options of commands that also read Perfetto traces (which are loaded as they are).
JSON_ONLY = "for a JSON trace, "


def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def annotations(help: str = ANNOTATIONS_HELP) -> argparse.ArgumentParser:
    """``-a / --annotations FILE`` (repeatable; a list, empty when not given)."""
    p = _parent()
    p.add_argument("--annotations", "-a", action="append", default=[], metavar="FILE", help=help)
    return p


def graph_lanes(default: Optional[str] = None, default_help: str = GRAPH_LANES_DEFAULT_HELP,
                prefix: str = "") -> argparse.ArgumentParser:
    """``--graph-lanes {all,none}``: ``default`` None lets the command pick (said by ``default_help``)."""
    p = _parent()
    p.add_argument("--graph-lanes", choices=("all", "none"), default=default,
                   help=f"{prefix}{GRAPH_LANES_HELP}. {default_help[:1].upper()}{default_help[1:]}")
    return p


def force_annotations() -> argparse.ArgumentParser:
    """``--force-annotations``."""
    p = _parent()
    p.add_argument("--force-annotations", action="store_true", help=FORCE_HELP)
    return p


def join(json_only: bool = False, annotations_help: str = ANNOTATIONS_HELP, graph_lanes_default: Optional[str] = None,
         graph_lanes_default_help: str = GRAPH_LANES_DEFAULT_HELP) -> List[argparse.ArgumentParser]:
    """The options of a command that joins a trace to annotations: ``--annotations``,
    ``--graph-lanes``, ``--force-annotations``. ``json_only``: the command also reads Perfetto
    traces, to which they do not apply (the help says so)."""
    prefix = JSON_ONLY if json_only else ""
    return [annotations(prefix + annotations_help),
            graph_lanes(graph_lanes_default, graph_lanes_default_help, prefix),
            force_annotations()]


def engine() -> argparse.ArgumentParser:
    """``--engine {auto,native,portable}``."""
    p = _parent()
    p.add_argument("--engine", choices=ENGINES, default="auto", help="trace processor to use (default: auto)")
    return p


def text_output() -> argparse.ArgumentParser:
    """``-o / --output FILE`` of a command that prints text (stdout when not given)."""
    p = _parent()
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="write to this file (atomically) instead of stdout; --format csv of several tables writes "
                   "one file per table, FILE.<table>.csv (FILE without its .csv)")
    return p


def trace_output(help: str) -> argparse.ArgumentParser:
    """``-o / --output OUT`` (required) of a command that writes a trace."""
    p = _parent()
    p.add_argument("-o", "--output", metavar="OUT", required=True, help=help)
    return p


def text_format() -> argparse.ArgumentParser:
    """``--format {table,csv,json}`` of a command that prints tables."""
    p = _parent()
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table (default): readable (durations in ns/µs/ms/s, timestamps from the trace start, "
                   "ratios in %%, fitted to the terminal); csv / json: every column, exact raw values (ns)")
    return p


#: ``-q`` on every command that has it: the result only.
QUIET_HELP = "print only the result (and errors): no progress, join summary, notes or 'wrote' lines"
#: ``--no-progress`` on every command that shows progress.
NO_PROGRESS_HELP = "never show the progress line (shown on stderr only when it is a terminal)"


def verbosity() -> argparse.ArgumentParser:
    """``--no-progress`` and ``-q / --quiet``, with one meaning on every command: the first
    only hides the progress line, the second prints nothing but the command's result (the
    tables it prints, the file it writes) and errors."""
    p = _parent()
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    p.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    return p


def progress_off(args: argparse.Namespace) -> bool:
    """Whether the progress line is off for these parsed options."""
    return bool(getattr(args, "no_progress", False) or getattr(args, "quiet", False))


class _DeprecatedSpelling(argparse.Action):
    """Stores the value; an old spelling (``self.old``) still works, with a note on stderr
    naming the new one."""

    def __init__(self, option_strings, dest, old: Sequence[str] = (), **kwargs):
        self.old = tuple(old)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string in self.old:
            new = next(o for o in self.option_strings if o not in self.old)
            print(f"{parser.prog}: note: {option_string} is deprecated here: use {new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def top(what: str, default: int, help: str) -> argparse.ArgumentParser:
    """``--top-<what> N`` (``--top-kernels``, ``--top-collectives``): how many rows of a ranked
    table to show. The bare ``--top`` of older releases meant kernels in ``report`` and
    collectives in ``fleet``; it still works, with a deprecation note."""
    p = _parent()
    p.add_argument(f"--top-{what}", "--top", dest=f"top_{what}", type=positive_int, default=default, metavar="N",
                   action=_DeprecatedSpelling, old=("--top",),
                   help=f"{help} (default: {default}; --top is the deprecated spelling)")
    return p


def timeout(help: str, default: Optional[float] = None) -> argparse.ArgumentParser:
    """``--timeout SECONDS``: a finite number of seconds above 0."""
    p = _parent()
    p.add_argument("--timeout", type=positive_seconds, default=default, metavar="SECONDS", help=help)
    return p


def default_stream() -> argparse.ArgumentParser:
    """``--default-stream N``: the lane of graphed kernels whose annotation names none."""
    p = _parent()
    p.add_argument("--default-stream", type=lane_id, default=None, metavar="N",
                   help="with --annotations: lane of graphed kernels whose annotation names none (default 7, "
                   "torch's); a lane id that no annotation uses")
    return p


def _number(text: str, parse, ok, not_a: str, out_of_range: str):
    """``parse(text)`` when it parses and ``ok`` holds, else an ``ArgumentTypeError`` saying which."""
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} {not_a}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r}{out_of_range}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    return _number(text, int, lambda v: v >= 1, "is not an integer", ": must be at least 1")


def lane_id(text: str) -> int:
    """argparse type: a lane id, an integer 0..2^32-1."""
    what = " is not a lane id (an integer 0..4294967295)"
    return _number(text, int, lambda v: 0 <= v < 1 << 32, what.lstrip(), what)


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds above 0 (0, negative, nan and inf are refused)."""
    return _number(text, float, lambda v: math.isfinite(v) and v > 0, "is not a number of seconds",
                   ": must be a finite number of seconds above 0")


def gzip() -> argparse.ArgumentParser:
    """``--gzip`` of a command that writes a ``.pftrace``."""
    p = _parent()
    p.add_argument("--gzip", action="store_true", help="gzip the .pftrace output (also implied by a .gz name)")
    return p


def no_sql() -> argparse.ArgumentParser:
    """``--no-sql`` of a command that ends with the SQL lane summary."""
    p = _parent()
    p.add_argument("--no-sql", action="store_true", help="skip the SQL lane summary (needs a trace processor)")
    return p
