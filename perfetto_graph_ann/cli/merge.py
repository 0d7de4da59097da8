"""``perfetto-graph-ann merge RANK0 RANK1 ... -o ALL.pftrace``: every rank in one trace.

A group per rank holding its GPUs (and its CPU processes, renamed with the rank),
clocks aligned on each trace's absolute time (baseTimeNanoseconds + ts), so a
collective can be followed across ranks.
"""
from __future__ import annotations

import argparse
import sys

from . import options

__all__ = ["register", "run"]


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("merge", help="merge several ranks' traces into one .pftrace",
                       description=__doc__.split("\n\n")[1],
                       parents=[options.trace_output("merged .pftrace (or .pftrace.gz) to write"),
                                *options.join(annotations_help=options.PER_TRACE_HELP + ", or once for every rank "
                                              "(only files without a capture identity: each rank is its own process)",
                                              graph_lanes_default_help="default: all for a rank whose annotations "
                                              "name a node, none (its recorded streams) for one whose annotations "
                                              "name nothing; all needs annotated nodes on every rank, as in torch"),
                                options.gzip(), options.verbosity()])
    p.add_argument("traces", nargs="+", metavar="TRACE", help="torch.profiler trace of one rank (.json / .json.gz)")
    p.add_argument("--label", action="append", default=[], metavar="TEXT",
                   help="name a trace's group '<TEXT> (rank <r>)' instead of 'Rank <r>': once per trace, in "
                   "order; lets two traces of one rank (e.g. eager and graphed) sit side by side")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, out=None) -> int:
    from ..errors import InputError
    from ..pipeline.merge import merge
    from ..util.atomic import refuse_input_as_output
    from ._common import load_annotation_files, print_join_summary

    out = out or sys.stdout
    refuse_input_as_output(args.output, [*args.traces, *args.annotations])  # merge() checks a JSON name
    n = len(args.traces)
    if not args.annotations:
        annotations = None
    elif len(args.annotations) == 1:
        one = load_annotation_files(args.annotations)
        annotations = [one] * n
    elif len(args.annotations) == n:
        annotations = [load_annotation_files([a]) for a in args.annotations]
    else:
        raise InputError(args.annotations[0], f"--annotations given {len(args.annotations)} times for {n} traces: "
                                              "give it once (all ranks) or once per trace")
    if args.label and len(args.label) != n:
        raise InputError(args.traces[0], f"--label given {len(args.label)} times for {n} traces: give it once per trace")
    from ..util.progress import Progress, wanted

    if not args.annotations:
        from ..pipeline.convert import check_lane_options

        check_lane_options(args.traces[0], args.annotations, args.graph_lanes)
    quiet = getattr(args, "quiet", False)
    with Progress("merge", enabled=wanted(options.progress_off(args))) as progress:
        report = merge(args.traces, args.output, annotations, graph_lanes=args.graph_lanes,
                       gzip=True if args.gzip else None, labels=args.label or None, progress=progress,
                       force=args.force_annotations)
    if quiet:
        return 0
    for item, path in zip(report.inputs, args.traces):
        label = f" [{item.label}]" if item.label is not None else ""
        print(f"rank {item.rank}{label}: {path} (clock shift {item.shift_ns} ns)", file=out)
        layout = item.layout
        if layout is not None:
            print_join_summary(layout.report, prefix=f"rank {item.rank}{label}: ")
    print(f"wrote {args.output}", file=out)
    return 0
