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


#: ``--graph-lanes`` help shared by the subcommands that join
GRAPH_LANES_HELP = ("all: move graphed kernels to their annotated lanes; none: keep the recorded streams "
                    "(torch 2.15's default). Default here: all when a node is annotated, else none; "
                    "all needs annotated nodes, as in torch")


def resolve_graph_lanes(requested: Optional[str], annotations, paths: Sequence[str], default: str = "all") -> str:
    """The ``graph_lanes`` a subcommand joins with: ``requested``, else ``default`` where a node
    is annotated and ``"none"`` where none is. ``"all"`` without annotated nodes is refused
    as torch 2.15 refuses it (an :class:`InputError`, exit 2), naming the files."""
    from ..errors import InputError
    from ..join.join import has_annotated_nodes

    annotated = has_annotated_nodes(annotations)
    if requested is None:
        return default if annotated else "none"
    if requested == "all" and not annotated:
        where = ", ".join(paths) if paths else "(no --annotations given)"
        raise InputError(paths[0] if paths else None,
                         f"--graph-lanes all needs annotations, and no node of {where} carries a field "
                         "(torch 2.15 refuses the same)")
    return requested


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
