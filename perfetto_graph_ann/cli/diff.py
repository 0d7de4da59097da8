"""``perfetto-graph-ann diff BASE NEW``: what changed between two runs.

Matches the two runs' graph replays (graph name and kernel count), then their scopes, lanes,
collectives and kernels by name, and ranks the differences of the medians across replays by
their effect on replay time; a difference is called real only beyond the replay-to-replay
spread of both runs (the rule is printed above the table). BASE and NEW may each be a fleet
of ranks (a folder, a quoted glob, or several traces with --base / --new): ranks are paired
by rank and compared pair by pair; per item the fleet's medians, slowest ranks, and the rank
that changed most (--by-rank: every rank's row).
"""
from __future__ import annotations

import argparse
import json
import sys

from . import options

__all__ = ["format_table", "format_fleet_table", "register", "run", "TABLE_COLUMNS", "FLEET_TABLE_COLUMNS",
           "BY_RANK_TABLE_COLUMNS"]

#: Columns of the table view (csv / json: every column).
TABLE_COLUMNS = ["rank", "kind", "name", "status", "real", "delta_dur", "delta_fraction", "base_dur", "new_dur",
                 "base_spread_dur", "new_spread_dur", "base_p50_kernel_count", "new_p50_kernel_count"]

#: Columns of the fleet table view.
FLEET_TABLE_COLUMNS = ["rank", "kind", "name", "status", "real", "delta_dur", "most_changed_rank", "real_ranks",
                       "median_delta_dur", "base_median_dur", "new_median_dur", "new_slowest_rank"]
#: Columns of the fleet's --by-rank table view.
BY_RANK_TABLE_COLUMNS = ["rank", "dist_rank", "kind", "name", "status", "real", "delta_dur", "delta_fraction",
                         "base_dur", "new_dur", "base_spread_dur", "new_spread_dur"]


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
    p.add_argument("base", metavar="BASE", nargs="?",
                   help="the reference run: torch.profiler JSON or .pftrace, one rank; or a fleet of ranks: a folder "
                   "of traces or a quoted glob ('run1/rank*.json.gz')")
    p.add_argument("new", metavar="NEW", nargs="?", help="the run to compare with it, likewise")
    p.add_argument("--base", dest="base_list", nargs="+", metavar="TRACE", default=None,
                   help="the reference fleet as several traces or folders (instead of BASE)")
    p.add_argument("--new", dest="new_list", nargs="+", metavar="TRACE", default=None,
                   help="the fleet to compare with it as several traces or folders (instead of NEW)")
    p.add_argument("--common-ranks", action="store_true",
                   help="fleets: compare only the ranks both fleets have (default: refuse fleets whose ranks differ)")
    p.add_argument("--by-rank", action="store_true",
                   help="fleets: one row per item and rank (dist_rank), instead of one per item")
    p.add_argument("--no-sidecars", action="store_true",
                   help="fleets: do not join each JSON trace with the sidecar beside it (<stem>.annotations.json, "
                   ".pga, .capture.json)")
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


def _sides(args: argparse.Namespace):
    """(base, new) as given: BASE NEW, or --base ... --new ... (a list each)."""
    from ..errors import GraphAnnError as UsageError

    if args.base_list is not None or args.new_list is not None:
        if args.base_list is None or args.new_list is None or args.base is not None or args.new is not None:
            raise UsageError("give --base TRACE... and --new TRACE... together, instead of BASE NEW")
        return list(args.base_list), list(args.new_list)
    if args.new is None:
        raise UsageError("give BASE and NEW (or --base TRACE... --new TRACE...)")
    return args.base, args.new


def _diff(args: argparse.Namespace, progress) -> str:
    from ..pipeline.diff import DiffConfig, diff, is_fleet
    from ..util.atomic import refuse_input_as_output

    base, new = _sides(args)
    config = DiffConfig(spread=args.spread, min_delta_ns=args.min_delta_ns, graph_lanes=args.graph_lanes,
                        force=args.force_annotations)
    if is_fleet(base) or is_fleet(new):
        return _diff_fleet(args, base, new, config, progress)
    for flag in ("common_ranks", "by_rank", "no_sidecars"):
        if getattr(args, flag):
            from ..errors import GraphAnnError as UsageError

            raise UsageError(f"--{flag.replace('_', '-')} is for fleets (a folder, a glob or several traces per side)")
    args.base, args.new = base, new
    refuse_input_as_output(args.output, [args.base, args.new, *args.annotations])
    anns = _annotations(args)
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


def _diff_fleet(args: argparse.Namespace, base, new, config, progress) -> str:
    from ..errors import GraphAnnError as UsageError
    from ..pipeline.diff import diff_fleet, fleet_traces
    from ..util.atomic import refuse_input_as_output

    if args.annotations:
        raise UsageError("--annotations is for one trace per side; a fleet's JSON traces are joined with the sidecars "
                         "beside them")
    refuse_input_as_output(args.output, [*map(str, fleet_traces(base)), *map(str, fleet_traces(new))])
    fleet, by_rank = diff_fleet(base, new, config, engine=args.engine, progress=progress,
                                common_ranks=args.common_ranks, find_sidecars=not args.no_sidecars)
    df = by_rank if args.by_rank else fleet
    rule = df.attrs["rule"]
    if args.format == "csv":
        if not args.quiet:
            print(f"perfetto-graph-ann diff: {rule}", file=sys.stderr)
        return df.to_csv(index=False)
    if args.format == "json":
        return json.dumps({"base": df.attrs["base"], "new": df.attrs["new"], "ranks": df.attrs["ranks"], "rule": rule,
                           "rows": json.loads(df.to_json(orient="records"))}, indent=1) + "\n"
    return format_fleet_table(df, args.top, args.by_rank)


def format_fleet_table(df, top: int, by_rank: bool = False) -> str:
    """The readable fleet diff: the ranks and their traces, the rule, the graphs, then the
    first ``top`` differences (per item, or per item and rank with ``by_rank``)."""
    from .tables import render

    cols = BY_RANK_TABLE_COLUMNS if by_rank else FLEET_TABLE_COLUMNS
    replays = df[df["kind"] == "replay"]
    items = df[df["kind"] != "replay"]
    ranks = df.attrs["ranks"]
    lines = [f"ranks: {len(ranks)} ({', '.join(map(str, ranks))})"]
    lines += [f"  rank {r}: base {b}" + "\n" + f"  {' ' * len(str(r))}       new  {n}"
              for r, b, n in zip(ranks, df.attrs["base"], df.attrs["new"])]
    lines += ["", df.attrs["rule"], ""]
    lines.append("graphs (time = wall time of a replay on the GPU; per rank, medians across replays)")
    lines.append(render(replays, columns=[c for c in cols if c not in ("rank", "kind")] +
                        ([] if by_rank else ["new_slowest_dur"])).rstrip("\n"))
    lines.append("")
    lines.append(f"differences: {int(items['real'].sum())} real of {len(items)} " +
                 ("(item, rank) rows" if by_rank else "items"))
    lines += _first_rows(items, top, cols)
    return "\n".join(lines) + "\n"


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
    lines += _first_rows(items, top, TABLE_COLUMNS)
    return "\n".join(lines) + "\n"


def _first_rows(items, top: int, columns) -> list:
    """The first ``top`` difference rows as table lines, and a line saying how many were left out."""
    from .tables import render

    if not len(items):
        return []
    shown = items.head(top)
    lines = [render(shown, columns=columns).rstrip("\n")]
    if len(items) > len(shown):
        lines.append(f"({len(items) - len(shown)} more: --top {len(items)}, or --format csv / json for all)")
    return lines
