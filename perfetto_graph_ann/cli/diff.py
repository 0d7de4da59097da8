"""``perfetto-graph-ann diff BASE NEW``: what changed between two runs.

Matches the two runs' graph replays (graph name and kernel count), then their scopes, lanes,
collectives and kernels by name, and ranks the differences of the medians across replays by
their effect on replay time; a difference is called real only beyond the replay-to-replay
spread of both runs (the rule is printed above the table).
"""
from __future__ import annotations

import argparse
import json
import sys

from . import options

__all__ = ["format_table", "register", "run", "TABLE_COLUMNS"]

#: Columns of the table view (csv / json: every column).
TABLE_COLUMNS = ["rank", "kind", "name", "status", "real", "delta_dur", "delta_fraction", "base_dur", "new_dur",
                 "base_spread_dur", "new_spread_dur", "base_p50_kernel_count", "new_p50_kernel_count"]


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("diff", help="what changed between two runs: replays, scopes, lanes, kernels",
                       description=__doc__.split("\n\n")[1],
                       parents=[*options.join(json_only=True, annotations_help=options.PER_TRACE_HELP
                                              + " (BASE then NEW; once: for every JSON trace)"),
                                options.engine(), options.text_format(), options.text_output(),
                                options.verbosity()])
    p.add_argument("base", metavar="BASE", help="the reference run: torch.profiler JSON or .pftrace, one rank")
    p.add_argument("new", metavar="NEW", help="the run to compare with it: torch.profiler JSON or .pftrace, one rank")
    p.add_argument("--spread", choices=("range", "iqr"), default="range",
                   help="replay-to-replay spread a difference must exceed in both runs to be real: range "
                   "(max - min, default) or iqr (p75 - p25)")
    p.add_argument("--min-delta-ns", type=_non_negative_int, default=0, metavar="NS",
                   help="a real difference must also exceed NS nanoseconds (default 0)")
    p.add_argument("--top", type=options.positive_int, default=30, metavar="N",
                   help="table format: show the first N ranked differences (default 30; csv / json: all)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from ._common import run_text_command

    return run_text_command("diff", args, _diff)


def _annotations(args: argparse.Namespace):
    """The annotation files of BASE and NEW: -a once per JSON trace, in order, or once for all."""
    from ..errors import InputError
    from ..formats import is_json_trace

    traces = [args.base, args.new]
    json_ix = [i for i, t in enumerate(traces) if is_json_trace(t)]
    out = [None, None]
    if not args.annotations:
        return out
    if not json_ix:
        raise InputError(args.annotations[0], "--annotations only apply to torch.profiler JSON traces, and "
                                              "neither BASE nor NEW is one")
    if len(args.annotations) == 1:
        for i in json_ix:
            out[i] = [args.annotations[0]]
    elif len(args.annotations) == len(json_ix):
        for i, a in zip(json_ix, args.annotations):
            out[i] = [a]
    else:
        raise InputError(args.annotations[0], f"--annotations given {len(args.annotations)} times for "
                                              f"{len(json_ix)} JSON traces: give it once (all) or once per JSON trace")
    return out


def _diff(args: argparse.Namespace, progress) -> str:
    from ..pipeline.diff import DiffConfig, diff
    from ..util.atomic import refuse_input_as_output

    refuse_input_as_output(args.output, [args.base, args.new, *args.annotations])
    anns = _annotations(args)
    config = DiffConfig(spread=args.spread, min_delta_ns=args.min_delta_ns, graph_lanes=args.graph_lanes,
                        force=args.force_annotations)
    df = diff(args.base, args.new, anns[0], anns[1], config=config, engine=args.engine, progress=progress)
    rule = df.attrs["rule"]
    if args.format == "csv":  # one table: the file -o names (raw values); the rule goes to stderr
        if not args.quiet:
            print(f"perfetto-graph-ann diff: {rule}", file=sys.stderr)
        return df.to_csv(index=False)
    if args.format == "json":
        return json.dumps({"base": args.base, "new": args.new, "rule": rule,
                           "rows": json.loads(df.to_json(orient="records"))}, indent=1) + "\n"
    return format_table(df, args.base, args.new, args.top)


def format_table(df, base: str, new: str, top: int) -> str:
    """The readable diff: the inputs, the rule, the graphs, then the first ``top`` differences."""
    from .tables import render

    replays = df[df["kind"] == "replay"]
    items = df[df["kind"] != "replay"]
    real = int(items["real"].sum())
    lines = [f"base: {base}", f"new:  {new}", "", df.attrs["rule"], ""]
    lines.append("graphs (time = wall time of a replay on the GPU; medians across replays)")
    lines.append(render(replays, columns=["name", "status", "real", "delta_dur", "delta_fraction", "base_dur",
                                          "new_dur", "base_spread_dur", "new_spread_dur", "base_p50_kernel_count",
                                          "new_p50_kernel_count", "base_p50_launch_latency_dur",
                                          "new_p50_launch_latency_dur"]).rstrip("\n"))
    lines.append("")
    lines.append(f"differences: {real} real of {len(items)} items")
    if len(items):
        shown = items.head(top)
        lines.append(render(shown, columns=TABLE_COLUMNS).rstrip("\n"))
        if len(items) > len(shown):
            lines.append(f"({len(items) - len(shown)} more: --top {len(items)}, or --format csv / json for all)")
    return "\n".join(lines) + "\n"
