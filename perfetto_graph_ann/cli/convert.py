"""``perfetto-graph-ann convert IN -o OUT``: torch.profiler Chrome trace to native Perfetto.

With ``--annotations`` the trace is joined with capture annotations first (semantic lanes,
restored collective args). An output ending in ``.json`` / ``.json.gz`` is annotated Chrome
JSON instead of a ``.pftrace``.
"""
from __future__ import annotations

import argparse
import os
import sys


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "convert",
        help="convert a torch.profiler trace (.json/.json.gz) to a native Perfetto trace",
        description="Convert a torch.profiler Chrome trace to a native Perfetto TrackEvent trace "
        "(exact ns times, named GPU lanes, typed args, flows). Output is written atomically.",
    )
    p.add_argument("input", metavar="IN", help="torch.profiler trace, .json or .json.gz")
    p.add_argument("-o", "--output", metavar="OUT", required=True,
                   help="output: .pftrace (or .pftrace.gz); .json/.json.gz writes annotated Chrome JSON")
    p.add_argument("--annotations", "-a", metavar="SIDECAR", action="append", default=[],
                   help="annotation sidecar or capture record (repeatable); enables semantic lanes")
    p.add_argument("--graph-lanes", choices=("all", "none"), default="all",
                   help="with --annotations: move graphed kernels to their lanes (all) or keep streams (none)")
    p.add_argument("--gzip", action="store_true", help="gzip the .pftrace output (also implied by a .gz name)")
    args_mode = p.add_mutually_exclusive_group()
    args_mode.add_argument("--typed-args", action="store_true",
                           help="write Kineto's list args (grid, block, Input Dims, Input Strides, Input type, "
                           "Concrete Inputs) as typed per-item args instead of one JSON-text string each "
                           "(the default): full fidelity, larger .pftrace, slower load")
    args_mode.add_argument("--compact-args", action="store_true",
                           help="Kineto's list args as one JSON-text string each (the default; kept for old scripts)")
    p.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from ..write.convert import paused_gc

    with paused_gc():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from ..read.kineto import read_trace
    from ..util.names import is_json_name
    from ..write.convert import ConvertConfig, convert
    from ..util.atomic import refuse_input_as_output
    from ._common import warn_unmatched

    refuse_input_as_output(args.output, [args.input, *args.annotations])
    trace = read_trace(args.input)
    layout = None
    if args.annotations:
        from ..join.join import join
        from ._common import load_annotation_files

        layout = join(trace, load_annotation_files(args.annotations), graph_lanes=args.graph_lanes)
        if not args.quiet:
            warn_unmatched(layout.report, args.annotations)
    out = args.output
    if is_json_name(out):  # any case: convert() refuses a protobuf trace under such a name
        from ..write.chrome_json import write_chrome_json

        write_chrome_json(trace, out, layout)
        if not args.quiet:
            print(f"wrote {out} (Chrome JSON, {len(trace.events)} events)")
        return 0
    config = ConvertConfig(gzip=True if args.gzip else None, progress=False if args.no_progress else None,
                           list_args="typed" if args.typed_args else "text")
    stats = convert(trace, out, config, layout)
    if not args.quiet:
        size = os.path.getsize(out)  # the file as written: compressed when gzipped
        gzipped = args.gzip or out.lower().endswith(".gz")
        size_text = f"{size} bytes (gzip; {stats.bytes} uncompressed)" if gzipped else f"{size} bytes"
        print(f"wrote {out}: {stats.slices} slices, {stats.instants} instants, {stats.counter_values} counter values, "
              f"{stats.flows} flows, {stats.tracks} tracks ({stats.spill_tracks} spill), {size_text}")
        if layout is not None:
            r = layout.report
            print(f"join: {r.total} GPU events, {r.graphed} graphed, matched {r.matched}, "
                  f"{r.ambiguous} ambiguous, {r.unmatched} unmatched")
        if stats.untimed:
            print(f"warning: {stats.untimed} events without ts could not be placed on the timeline", file=sys.stderr)
    return 0
