"""``perfetto-graph-ann``: argument parsing and dispatch only.

Each subcommand lives in its own module of this package exposing
``register(subparsers) -> argparse.ArgumentParser`` (which sets ``func``); heavy
imports happen inside the command, so ``--help`` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

from .._version import __version__
from ..errors import GraphAnnError

__all__ = ["build_parser", "COMMANDS", "main"]

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS = ("demo", "run", "convert", "lanes", "report", "sql", "merge", "diff", "fleet", "open")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfetto-graph-ann",
        description="Semantic lanes and restored collective metadata for CUDA-graphed PyTorch "
        "profiles, as native Perfetto traces with a PerfettoSQL package on top.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f".{name}", __package__).register(sub)
    return parser


def _tolerant_output() -> None:
    """Print what the console cannot encode as escapes instead of failing: file names are
    bytes on Linux (one that is not UTF-8 decodes to surrogates) and the tables say µs, so a
    strict UTF-8 or ASCII stdout raised UnicodeEncodeError after the work was done."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def _terminate(signum, frame):  # noqa: ARG001
    raise SystemExit(128 + signum)


def _sigterm_ends_cleanly():
    """SIGTERM ends the command as Ctrl-C does: the ``finally`` blocks and context managers
    run (a trace processor session's temporary folder, the engines, half-written outputs are
    removed) and the exit status is 143. The default action would kill the process on the
    spot and leave them. Returns the previous handler (None: not the main thread)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        return signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main interpreter
        return None


def main(argv: Optional[List[str]] = None) -> int:
    _tolerant_output()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    previous = _sigterm_ends_cleanly()
    try:
        return _run(args)
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)


def _run(args) -> int:
    try:
        from ._common import discover_sidecars

        discover_sidecars(args)
        rc = args.func(args)
    except GraphAnnError as e:
        print(f"perfetto-graph-ann {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"perfetto-graph-ann {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
