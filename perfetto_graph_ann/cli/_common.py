"""What several subcommands share: option choices, loading annotation files, writing output.

Heavy imports stay inside the functions, so building the parser (``--help``) stays fast.
"""
from __future__ import annotations

import argparse
import math
import sys
from typing import Optional, Sequence

#: ``--engine`` choices: ``query.engine.config.ENGINES``, repeated because importing the
#: engine package costs ~0.3 s (tests/test_package.py checks they agree).
ENGINES = ("auto", "native", "portable")


def load_annotation_files(paths: Sequence[str]):
    """Merge the annotations of several files (sidecars or capture records)."""
    from ..capture.sidecar import load_annotation_files as load

    return load(paths)


def warn_unmatched(report, annotation_paths: Sequence[str], out=None) -> None:
    """One warning line on stderr when annotations were given but graphed GPU work stayed
    unmatched (a sidecar saved before the capture, or from another run): the join itself
    only counts them, and they silently keep the default lane."""
    if not annotation_paths or not report.graphed or not report.unmatched:
        return
    files = ", ".join(annotation_paths)
    if report.unmatched == report.graphed:
        what = f"none of the {report.graphed} graph-launched GPU events matched the annotations in {files} " \
               "(are they from this run?)"
    else:
        what = f"{report.unmatched} of the {report.graphed} graph-launched GPU events matched no annotation in {files}"
    print(f"warning: {what}", file=out or sys.stderr)


def hint_annotations(report, annotation_paths: Sequence[str], out=None) -> None:
    """One hint line on stderr when no annotations were given but graph-launched GPU work
    stayed unmatched: the join needs the capture's sidecar to name those kernels' lanes."""
    if annotation_paths or not report.graphed or not report.unmatched:
        return
    print(f"hint: {report.unmatched} graph-launched GPU events have no annotations to join; pass the sidecar "
          "saved at capture (--annotations run.annotations.json, from pga.save_annotations) to give them "
          "their lanes", file=out or sys.stderr)


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
