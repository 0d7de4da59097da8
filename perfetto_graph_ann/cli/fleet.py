"""``perfetto-graph-ann fleet DIR_OR_FILES... [--ray ADDRESS]``: which rank is slow.

Loads every rank's trace in its own engine (here, or one Ray task per trace on a
cluster), matches the collectives across ranks by process group and order, and prints the
straggler ranking (who arrives last, how long the others wait for it) and the collectives
with the largest arrival spread. torch.profiler JSON traces are joined with the sidecar
saved beside them (<stem>.annotations.json or .pga) and converted on the worker.
"""
from __future__ import annotations

import argparse
import json

from . import options
from ._common import CsvTables, write_csv_tables, write_output

__all__ = ["register", "run"]


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("fleet", help="straggler ranking over many ranks' traces (locally or on Ray)",
                       description=__doc__.split("\n\n")[1],
                       parents=[options.annotations(options.PER_TRACE_HELP + " (default: the sidecar saved beside "
                                                    "each JSON trace)"),
                                options.engine(), options.text_output(), options.text_format(), options.verbosity(),
                                options.top("collectives", 10, "the N collectives with the largest arrival spread")])
    p.add_argument("inputs", nargs="+", metavar="DIR_OR_FILE",
                   help="per-rank traces (.json/.json.gz/.pftrace), or folders holding them (files there that "
                   "are not traces, e.g. a summary.json, are skipped and named)")
    p.add_argument("--no-sidecars", action="store_true", help="do not look for sidecars beside the traces")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run one Ray task per trace on the cluster at ADDRESS (auto, ray://HOST:10001, ...; "
                   "'local' starts a local instance); needs the cluster extra")
    p.add_argument("--ship", choices=("auto", "path", "store"), default="auto",
                   help="with --ray: send traces through Ray's object store when a worker cannot see the path "
                   "(auto), never (path: shared storage) or always (store)")
    p.add_argument("--workers", type=options.positive_int, default=None, metavar="N",
                   help="engines at a time (local; default: CPUs) or tasks in flight (Ray; default: 2 x CPUs)")
    p.add_argument("--memory-per-engine", type=options.positive_int, default=None, metavar="MIB",
                   help="with --ray: memory each task reserves, so a node runs only as many engines as fit")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    import sys

    from ..query.executors import RayOptions
    from ..pipeline.fleet import fleet_report
    from ..query.fleet import find_traces
    from ..util.atomic import refuse_input_as_output

    annotations = None
    traces = find_traces(args.inputs)
    if args.annotations:
        if len(args.annotations) != len(traces):
            raise _usage(f"--annotations was given {len(args.annotations)} times for {len(traces)} traces "
                         "(give it once per trace, in order)")
        annotations = list(args.annotations)
    refuse_input_as_output(args.output, [*map(str, traces), *args.annotations])
    executor = "local"
    ray_options = None
    if args.ray is not None:
        executor = "ray"
        ray_options = RayOptions(address=None if args.ray == "local" else args.ray, ship=args.ship,
                                 memory_per_engine=args.memory_per_engine << 20 if args.memory_per_engine else None)
    report = fleet_report(args.inputs, annotations=annotations, executor=executor, engine=args.engine,
                          max_workers=args.workers, progress=False if options.progress_off(args) else None,
                          ray_options=ray_options, find_sidecars=not args.no_sidecars)
    if report.skipped and not args.quiet:
        print(f"perfetto-graph-ann fleet: note: skipped {len(report.skipped)} file(s) that are not traces: "
              f"{', '.join(report.skipped)}", file=sys.stderr)
    top = args.top_collectives
    if args.format == "csv":
        write_csv_tables("fleet", CsvTables(_tables(report, top)), args.output, args.quiet,
                         [*map(str, traces), *args.annotations])
        return 0
    text = _json(report, top) if args.format == "json" else _table(report, top)
    write_output(text, args.output, args.quiet)
    return 0


def _usage(message: str):
    from ..errors import GraphAnnError

    return GraphAnnError(message)


def _tables(report, top: int) -> dict:
    """The report's tables by name (what ``--format json`` holds as lists, ``csv`` as files)."""
    return {"ranking": report.ranking, "worst_collectives": report.worst_collectives(top),
            "collectives": report.collectives, "lanes": report.lanes, "rank_info": report.ranks}


def _records(df) -> list:
    return json.loads(df.to_json(orient="records"))


def _json(report, top: int) -> str:
    doc = {"ranks": len(report.ranks), **{k: _records(v) for k, v in _tables(report, top).items()},
           "skipped": list(report.skipped)}
    return json.dumps(doc, indent=1) + "\n"


def _table(report, top: int) -> str:
    """The readable view, in the style of every table of the CLI (:mod:`.tables`)."""
    from .tables import render

    c = report.collectives
    lines = []
    blamed = int(c["blamed"].sum()) if len(c) else 0
    lines.append(f"{len(report.ranks)} ranks, {len(c)} collective instances, {blamed} of them complete and "
                 "consistent across ranks (the ones ranked)")
    hosts = report.ranks["host"].dropna().unique()
    if len(hosts) > 1:
        lines.append(f"note: the ranks ran on {len(hosts)} hosts: arrival times compare only as well as "
                     "their clocks agree")
    skipped = c[~c["blamed"]] if len(c) else c
    if len(skipped):
        incomplete = int((~skipped["complete"]).sum())
        inconsistent = int((skipped["complete"] & ~skipped["consistent"]).sum())
        lines.append(f"not ranked: {incomplete} instances missing on some rank of their group, "
                     f"{inconsistent} whose ranks disagree on type or size")
    lines.append("")
    lines.append("Straggler ranking (lateness = start - the instance's median start)")
    titles = {"times_last": "last", "times_tied_last": "tied", "peer_wait_caused_ns": "peers waited",
              "delay_caused_ns": "delay caused", "median_lateness_ns": "median late", "max_lateness_ns": "max late",
              "waited_ns": "waited"}
    r = report.ranking.rename(columns=titles)
    cols = ["rank", "last", "tied", "peers waited", "delay caused", "median late", "max late", "waited", "trace"]
    lines.append(render(r, columns=cols, keys=["rank"], durations=cols[3:8]).rstrip("\n"))
    worst = report.worst_collectives(top).copy()
    lines.append("")
    lines.append(f"Largest arrival spreads (top {top})")
    if not len(worst):
        lines.append("  (no collective matched on two or more ranks)")
    else:
        worst["pg"] = [pg if not isinstance(desc, str) else f"{pg} ({desc})" for pg, desc in zip(worst["pg"], worst["pg_desc"])]
        worst["last_rank"] = ["tie" if tied > 1 else str(last) for last, tied in zip(worst["last_rank"], worst["last_tied"])]
        worst = worst.rename(columns={"seq": "#", "collective_type": "collective", "msg_bytes": "bytes",
                                      "spread_ns": "spread", "last_rank": "last rank", "last_lead_ns": "lead",
                                      "peer_wait_ns": "peers waited"})
        cols = ["pg", "#", "collective", "bytes", "ranks", "spread", "last rank", "lead", "peers waited"]
        lines.append(render(worst, columns=cols, keys=["pg", "#"], durations=["spread", "lead", "peers waited"])
                     .rstrip("\n"))
    return "\n".join(lines) + "\n"
