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
from ._common import positive_int, write_output


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("fleet", help="straggler ranking over many ranks' traces (locally or on Ray)",
                       description=__doc__.split("\n\n")[1],
                       parents=[options.annotations(options.PER_TRACE_HELP + " (default: the sidecar saved beside "
                                                    "each JSON trace)"),
                                options.engine(), options.no_progress(), options.text_output()])
    p.add_argument("inputs", nargs="+", metavar="DIR_OR_FILE",
                   help="per-rank traces (.json/.json.gz/.pftrace), or folders holding them")
    p.add_argument("--no-sidecars", action="store_true", help="do not look for sidecars beside the traces")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run one Ray task per trace on the cluster at ADDRESS (auto, ray://HOST:10001, ...; "
                   "'local' starts a local instance); needs the cluster extra")
    p.add_argument("--ship", choices=("auto", "path", "store"), default="auto",
                   help="with --ray: send traces through Ray's object store when a worker cannot see the path "
                   "(auto), never (path: shared storage) or always (store)")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="engines at a time (local; default: CPUs) or tasks in flight (Ray; default: 2 x CPUs)")
    p.add_argument("--memory-per-engine", type=positive_int, default=None, metavar="MIB",
                   help="with --ray: memory each task reserves, so a node runs only as many engines as fit")
    p.add_argument("--top", type=positive_int, default=10, metavar="N",
                   help="collectives with the largest arrival spread to show (default: 10)")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table: readable (µs); json: ranking, collectives, lanes and ranks, raw units (ns)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from ..query.executors import RayOptions
    from ..pipeline.fleet import fleet_report
    from ..query.fleet import find_traces

    annotations = None
    if args.annotations:
        traces = find_traces(args.inputs)
        if len(args.annotations) != len(traces):
            raise _usage(f"--annotations was given {len(args.annotations)} times for {len(traces)} traces "
                         "(give it once per trace, in order)")
        annotations = list(args.annotations)
    executor = "local"
    ray_options = None
    if args.ray is not None:
        executor = "ray"
        ray_options = RayOptions(address=None if args.ray == "local" else args.ray, ship=args.ship,
                                 memory_per_engine=args.memory_per_engine << 20 if args.memory_per_engine else None)
    report = fleet_report(args.inputs, annotations=annotations, executor=executor, engine=args.engine,
                          max_workers=args.workers, progress=False if args.no_progress else None,
                          ray_options=ray_options, find_sidecars=not args.no_sidecars)
    text = _json(report, args.top) if args.format == "json" else _table(report, args.top)
    write_output(text, args.output)
    return 0


def _usage(message: str):
    from ..errors import GraphAnnError

    return GraphAnnError(message)


def _records(df) -> list:
    return json.loads(df.to_json(orient="records"))


def _json(report, top: int) -> str:
    doc = {
        "ranks": len(report.ranks),
        "ranking": _records(report.ranking),
        "worst_collectives": _records(report.worst_collectives(top)),
        "collectives": _records(report.collectives),
        "lanes": _records(report.lanes),
        "rank_info": _records(report.ranks),
    }
    return json.dumps(doc, indent=1) + "\n"


def _us(value) -> str:
    if value is None or value != value:
        return "-"
    return f"{value / 1000:,.1f}"


def _table(report, top: int) -> str:
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
    lines.append("Straggler ranking (times in µs; lateness = start - the instance's median start)")
    r = report.ranking
    table = [["rank", "last", "tied", "peers waited", "delay caused", "median late", "max late", "waited", "trace"]]
    for row in r.itertuples(index=False):
        table.append([str(row.rank), str(row.times_last), str(row.times_tied_last), _us(row.peer_wait_caused_ns),
                      _us(row.delay_caused_ns), _us(row.median_lateness_ns), _us(row.max_lateness_ns),
                      _us(row.waited_ns), row.trace])
    lines.extend(_align(table))
    worst = report.worst_collectives(top)
    lines.append("")
    lines.append(f"Largest arrival spreads (top {top}; µs)")
    table = [["pg", "#", "collective", "bytes", "ranks", "spread", "last rank", "lead", "peers waited"]]
    for row in worst.itertuples(index=False):
        pg = row.pg if not isinstance(row.pg_desc, str) else f"{row.pg} ({row.pg_desc})"
        last = "tie" if row.last_tied > 1 else str(row.last_rank)
        table.append([pg, str(row.seq), str(row.collective_type), _count(row.msg_bytes), str(row.ranks),
                      _us(row.spread_ns), last, _us(row.last_lead_ns), _us(row.peer_wait_ns)])
    if len(table) == 1:
        lines.append("  (no collective matched on two or more ranks)")
    else:
        lines.extend(_align(table))
    return "\n".join(lines) + "\n"


def _count(value) -> str:
    return "-" if value is None or value != value else f"{int(value):,}"


def _align(rows) -> list:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.ljust(w) if i in (0, len(r) - 1) or not _numeric(c) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def _numeric(cell: str) -> bool:
    return cell.replace(",", "").replace(".", "").replace("-", "").isdigit() or cell == "-"

