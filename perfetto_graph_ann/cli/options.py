"""The options several subcommands share, each declared once, as argparse parent parsers.

A subcommand names the parents it takes::

    sub.add_parser("report", parents=[*options.join(json_only=True), options.engine(), options.quiet()])

Each function returns a fresh parent (``add_help=False``): the flags, metavar, default and
help of an option are written here only. Where an option's meaning differs by command (the
``--graph-lanes`` default, ``--annotations`` given once per trace) the function takes that
difference as an argument, and the rest of its declaration stays shared.
"""
from __future__ import annotations

import argparse
from typing import List, Optional

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
                   help="write to this file (atomically) instead of stdout")
    return p


def trace_output(help: str) -> argparse.ArgumentParser:
    """``-o / --output OUT`` (required) of a command that writes a trace."""
    p = _parent()
    p.add_argument("-o", "--output", metavar="OUT", required=True, help=help)
    return p


def text_format() -> argparse.ArgumentParser:
    """``--format {table,csv,json}`` of a command that prints SQL results."""
    p = _parent()
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table (default): readable (durations in µs/ms, timestamps from the trace start, ratios "
                   "in %%, fitted to the terminal); csv / json: every column, exact raw values (ns)")
    return p


def quiet(help: str = "no progress on stderr") -> argparse.ArgumentParser:
    """``-q / --quiet``; ``help`` says what else a command leaves out."""
    p = _parent()
    p.add_argument("-q", "--quiet", action="store_true", help=help)
    return p


def no_progress() -> argparse.ArgumentParser:
    """``--no-progress`` (a command's output stays, only the progress bar goes)."""
    p = _parent()
    p.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    return p


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
