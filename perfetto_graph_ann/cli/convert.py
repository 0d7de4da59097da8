"""``perfetto-graph-ann convert IN -o OUT``: torch.profiler Chrome trace to native Perfetto.

With ``--annotations`` the trace is joined with capture annotations first (semantic lanes,
restored collective args). An output ending in ``.json`` / ``.json.gz`` is annotated Chrome
JSON instead of a ``.pftrace``.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import options

__all__ = ["register", "run"]


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "convert",
        help="convert a torch.profiler trace (.json/.json.gz) to a native Perfetto trace",
        description="Convert a torch.profiler Chrome trace to a native Perfetto TrackEvent trace "
        "(exact ns times, named GPU lanes, typed args, flows). Output is written atomically.",
        parents=[
            options.trace_output("output: .pftrace (or .pftrace.gz); .json/.json.gz writes annotated Chrome JSON"),
            *options.join(graph_lanes_default_help="default: all for a .pftrace, none (torch 2.15's default) "
                          "for .json; none when no node is annotated; all needs annotated nodes, as in torch"),
            options.gzip(), options.verbosity(), options.default_stream(),
        ],
    )
    p.add_argument("input", metavar="IN", help="torch.profiler trace, .json or .json.gz")
    args_mode = p.add_mutually_exclusive_group()
    args_mode.add_argument("--typed-args", action="store_true",
                           help="write Kineto's list args (grid, block, Input Dims, Input Strides, Input type, "
                           "Concrete Inputs) as typed per-item args instead of one JSON-text string each "
                           "(the default): full fidelity, larger .pftrace, slower load")
    args_mode.add_argument("--compact-args", action="store_true",
                           help="Kineto's list args as one JSON-text string each (the default; kept for old scripts)")
    p.add_argument("--edge-flows", action="store_true",
                   help="with annotations recorded with their graphs' dependency edges (sidecar version 4): draw "
                   "each replay's edges as flows between its kernels (none above 1,200,000 flows, with a note)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from ..pipeline.convert import ConvertConfig, convert_file
    from ..formats import is_gzip_name
    from ..util.progress import Progress, wanted
    from ._common import print_join_summary

    quiet_bar = options.progress_off(args)
    config = ConvertConfig(gzip=True if args.gzip else None, progress=False if quiet_bar else None,
                           list_args="typed" if args.typed_args else "text")
    progress = Progress("convert", enabled=wanted(quiet_bar))
    try:
        done = convert_file(args.input, args.output, args.annotations, args.graph_lanes, args.default_stream,
                            args.force_annotations, config, progress,
                            on_join=None if args.quiet else lambda layout: print_join_summary(layout.report),
                            edge_flows=args.edge_flows)
    finally:
        progress.close()
    if args.quiet:
        return 0
    out = args.output
    if done.stats is None:
        print(f"wrote {out} (Chrome JSON, {done.events} events)")
        return 0
    stats = done.stats
    size = os.path.getsize(out)  # the file as written: compressed when gzipped
    gzipped = args.gzip or is_gzip_name(out)
    size_text = f"{size} bytes (gzip; {stats.bytes} uncompressed)" if gzipped else f"{size} bytes"
    print(f"wrote {out}: {stats.slices} slices, {stats.instants} instants, {stats.counter_values} counter values, "
          f"{stats.flows} flows, {stats.tracks} tracks ({stats.spill_tracks} spill), {size_text}")
    if stats.untimed:
        print(f"warning: {stats.untimed} events without ts could not be placed on the timeline", file=sys.stderr)
    return 0
