"""``perfetto-graph-ann report TRACE``: the ``graph_ann`` SQL metrics as tables.

Prints per-lane utilization and duration percentiles, the top kernels per lane, CUDA
graph replays, collectives with their bandwidths, compute/communication overlap and idle
gaps per lane. TRACE is a trace written by this package (.pftrace); a torch.profiler JSON
trace is converted first (with --annotations, joined to them).

The table view summarises: per section a title line with the row count and column totals,
the first ``--rows`` rows in the section's order (:data:`SUMMARIES`: the longest replays, the
busiest lanes, ...) in a few columns, and a line saying how many rows were left out. ``--all``
prints every row and column, as ``--format csv / json`` always do; the summary reads only
the shown rows and the totals from the engine (``metrics.summary_rows``), so a trace of a million
kernels prints in about the time its load takes.

A merged trace's groups (ranks, --label) are kept apart: a groups table first, and every row
names its group (:func:`with_groups`).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from . import options
from ._common import CsvTables, note_annotations_ignored, open_session, print_join_summary, run_text_command

__all__ = ["format_report", "format_summary", "register", "run", "SECTIONS", "SUMMARIES", "summarize", "with_groups"]

if TYPE_CHECKING:
    from ..query.metrics import TopRows

#: Section title and the columns the table view shows (``--format csv/json`` give all).
SECTIONS: Dict[str, Tuple[str, List[str]]] = {
    "groups": ("Groups of the merged trace (graph_ann_group)", ["group_id", "name", "rank", "label"]),
    "lane_summary": ("Lanes (graph_ann_lane)", [
        "device", "lane_id", "lane_name", "work_count", "busy_dur", "utilization", "replay_utilization",
        "mean_dur", "p50_dur", "p90_dur", "p99_dur", "max_dur"]),
    "lane_top_kernels": ("Top kernels per lane (graph_ann_lane_top_kernels)", [
        "device", "lane_id", "rank", "name", "count", "total_dur", "share"]),
    "replays": ("Graph replays (graph_ann_replay)", [
        "device", "replay_index", "correlation", "graph_id", "replay", "work_count", "wall_dur", "busy_dur",
        "queued_dur", "launch_overhead_dur"]),
    "collectives": ("Collectives (graph_ann_collective)", [
        "device", "lane_id", "collective_type", "dtype", "msg_bytes", "group_size", "pg_desc", "dur",
        "algbw_gbps", "busbw_gbps"]),
    "overlap": ("Compute / communication overlap (graph_ann_overlap)", [
        "device", "dur", "busy_dur", "compute_dur", "comm_dur", "overlapped_comm_dur", "exposed_comm_dur",
        "comm_overlap_fraction", "idle_dur"]),
    "lane_idle": ("Idle gaps per lane (graph_ann_lane_idle)", [
        "device", "lane_id", "lane_name", "span_dur", "busy_dur", "idle_dur", "gap_count", "max_gap_dur"]),
    "scopes": ("Scopes on the GPU, per scope across replays (graph_ann_scope_stats)", [
        "graph_name", "scope_path", "instance_count", "kernel_count", "mean_dur", "p50_dur", "p90_dur",
        "max_dur", "mean_busy_dur"]),
    "modules": ("Modules, per module path across replays (graph_ann_module_summary)", [
        "graph_name", "module_path", "module_class", "depth", "replays", "kernel_count", "mean_total_dur",
        "mean_self_dur", "mean_replay_share"]),
    "module_kinds": ("Module kinds, each module of every layer together (graph_ann_module_kind)", [
        "graph_name", "kind_path", "module_class", "depth", "module_count", "replays", "kernel_count",
        "mean_total_dur", "mean_self_dur", "mean_replay_share", "mean_self_share"]),
    "critical_paths": ("Critical path, per graph and scope across replays (graph_ann_critical_path_scope_summary)", [
        "graph_id", "scope", "edges_source", "replay_count", "bound_count", "mean_share_dur", "mean_share_fraction",
        "min_slack_dur", "mean_slack_dur"]),
}


@dataclasses.dataclass(frozen=True)
class Summary:
    """How the table view summarises a section: which rows come first, which columns show,
    which columns the title line sums over the whole table."""

    order_by: str  #: SQL order of the shown rows (the table's own order breaks ties)
    order_text: str  #: the order in words, for the title line
    columns: List[str]  #: the columns shown (``--all``: those of :data:`SECTIONS`)
    sums: List[str] = dataclasses.field(default_factory=list)  #: columns summed in the title line


#: The summary of each section, by :data:`SECTIONS` key: columns that fit 80 terminal columns.
SUMMARIES: Dict[str, Summary] = {
    "groups": Summary("group_id", "first group_id", ["group_id", "name", "rank", "label"]),
    "lane_summary": Summary("busy_dur DESC", "most busy_dur", [
        "device", "lane_id", "lane_name", "work_count", "busy_dur", "utilization"], ["work_count", "busy_dur"]),
    "lane_top_kernels": Summary("total_dur DESC", "most total_dur", [
        "device", "lane_id", "rank", "name", "count", "total_dur", "share"]),
    "replays": Summary("wall_dur DESC", "longest wall_dur", [
        "device", "replay_index", "graph_id", "wall_dur", "busy_dur", "launch_overhead_dur"], ["wall_dur"]),
    "collectives": Summary("dur DESC", "longest dur", [
        "device", "lane_id", "collective_type", "msg_bytes", "group_size", "dur", "busbw_gbps"], ["dur"]),
    "overlap": Summary("exposed_comm_dur DESC", "most exposed_comm_dur", [
        "device", "compute_dur", "comm_dur", "exposed_comm_dur", "comm_overlap_fraction", "idle_dur"]),
    "lane_idle": Summary("idle_dur DESC", "most idle_dur", [
        "device", "lane_id", "lane_name", "idle_dur", "gap_count", "max_gap_dur"], ["idle_dur"]),
    "scopes": Summary("mean_dur DESC", "longest mean_dur", [
        "graph_name", "scope_path", "instance_count", "mean_dur", "max_dur"]),
    "modules": Summary("mean_total_dur DESC", "longest mean_total_dur", [
        "graph_name", "module_path", "mean_total_dur", "mean_self_dur"]),
    "module_kinds": Summary("mean_self_dur DESC", "most mean_self_dur", [
        "graph_name", "kind_path", "module_count", "mean_self_dur", "mean_self_share"]),
    "critical_paths": Summary("bound_count DESC, mean_share_dur DESC", "bounds the most replays", [
        "graph_id", "scope", "edges_source", "bound_count", "mean_share_dur", "min_slack_dur"]),
}

#: Lines the default table view stays within (a trace of any size): :func:`default_rows`.
LINE_BUDGET = 60


def default_rows(sections: int) -> int:
    """Rows per section that keep ``sections`` full sections (title, column header and rule,
    the rows, the left-out line, a blank line; after the trace's name and a blank line) within
    :data:`LINE_BUDGET` lines: 3 for a trace's seven sections, 2 with a merge's groups."""
    return max(1, (LINE_BUDGET - 2 - 5 * sections) // sections)


#: Report section -> the :data:`perfetto_graph_ann.query.metrics.METRICS` table it shows.
_METRIC = {"groups": "groups", "lane_summary": "lane_summary", "lane_top_kernels": "lane_top_kernels",
           "replays": "replays", "collectives": "collectives", "overlap": "overlap", "lane_idle": "lane_idle",
           "scopes": "scope_summary", "modules": "module_summary", "module_kinds": "module_kind_summary",
           "critical_paths": "critical_path_summary"}


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("report", help="lane, replay, collective and overlap metrics of a trace (graph_ann SQL)",
                       description=__doc__.split("\n\n")[1],
                       parents=[*options.join(json_only=True), options.text_format(), options.engine(),
                                options.text_output(), options.verbosity(),
                                options.top("kernels", 5, "the N kernels with the most GPU time per lane")])
    p.add_argument("trace", help=".pftrace written by this package, or a torch.profiler JSON trace (.json, .json.gz)")
    p.add_argument("--rows", type=options.positive_int, default=None, metavar="N",
                   help=f"table view: the first N rows of each section, after a line with its row count and "
                   f"totals (default: as many as keep the report within {LINE_BUDGET} lines: 3, 2 for a merged "
                   "trace)")
    p.add_argument("--all", action="store_true",
                   help="table view: every row and column of every section (--format csv / json always give all)")
    p.add_argument("--by", choices=("module", "critical-path"), action="append", default=[],
                   help="module: also the time of every nn.Module path across replays (module scopes of "
                   "perfetto-graph-ann run --modules, pga.instrument(modules=True) or pga.mark_modules); "
                   "critical-path: also which scope bounds each graph's replays (largest share of the chain of "
                   "dependent GPU work that ends last) and the slack of the others")
    p.set_defaults(func=run)
    return p


def format_report(tables: Dict[str, "object"], fmt: str = "table", trace_start: Optional[int] = None,
                  width: Optional[int] = None) -> str:
    """Render :func:`perfetto_graph_ann.query.metrics.report`'s tables as text: ``table`` is
    readable (:mod:`.tables`: durations in µs / ms, timestamps from ``trace_start``, ratios
    in %, fitted to ``width``); ``csv`` / ``json`` keep every column's exact raw value
    (``csv``: one stream, each table after a ``# <name>`` line; the CLI writes one file per
    table with ``-o``)."""
    if fmt == "json":
        return json.dumps({k: json.loads(v.to_json(orient="records")) for k, v in tables.items()}, indent=1) + "\n"
    from .tables import render

    parts = []
    for key, df in tables.items():
        title, columns = SECTIONS[key]
        if "group" in df.columns and key != "groups":  # a merged trace's rows name their group first
            columns = ["group", *columns]
        if fmt == "csv":
            parts.append(f"# {key}\n" + df.to_csv(index=False))
            continue
        parts.append(title)
        if df.empty:
            parts.append("  (none)\n")
            continue
        parts.append(render(df, trace_start=trace_start, width=width, columns=columns))
    return "\n".join(parts)


def run(args: argparse.Namespace) -> int:
    return run_text_command("report", args, _report)


def _report(args: argparse.Namespace, progress) -> str:
    from ..formats import is_json_trace
    from ..util.atomic import refuse_input_as_output

    refuse_input_as_output(args.output, [args.trace, *args.annotations])
    name = os.path.basename(args.trace)
    with contextlib.ExitStack() as stack:
        # the heavy imports (pandas) inside the phases: the progress line shows at once
        if is_json_trace(args.trace):
            from ..pipeline.convert import check_lane_options

            check_lane_options(args.trace, args.annotations, args.graph_lanes)  # before the engine starts
            s = stack.enter_context(_open_json(args, progress))
        else:
            note_annotations_ignored("report", args.trace, args.annotations, args.graph_lanes, args.quiet)
            with progress.phase(f"loading {name} into the trace processor"):
                s = open_session(stack, args.trace, engine=args.engine)
        from ..query import metrics
        from ..query.includes import include_modules
        from .tables import trace_start_ns

        summary = args.format == "table" and not args.all
        # each module on its own first, so the progress line says which one runs
        include_modules(s, _summary_modules(_summary_keys("module" in args.by, "critical-path" in args.by))
                        if summary else [metrics.METRICS[key].module for key in SECTIONS if key in metrics.METRICS],
                        progress)
        with progress.phase("reading the report tables"):
            if summary:
                parts = summarize(s, args.rows, args.top_kernels, modules="module" in args.by,
                                  critical_path="critical-path" in args.by)
            else:
                tables = with_groups(metrics.report(s, top=args.top_kernels, modules="module" in args.by,
                                                    critical_path="critical-path" in args.by), metrics.groups(s))
        start = trace_start_ns(s) if args.format == "table" else None
    if args.format == "csv":
        return CsvTables(tables, [args.trace, *args.annotations])
    text = format_summary(parts, start) if summary else format_report(tables, args.format, start)
    if args.format == "table":
        text = f"{args.trace}\n\n{text}"
    return text


def summarize(session, rows: Optional[int], top_kernels: int, modules: bool = False,
              critical_path: bool = False) -> Dict[str, "TopRows"]:
    """The summary of each report section on ``session`` (its modules included): the first
    ``rows`` rows (None: :func:`default_rows`) in the order of :data:`SUMMARIES`, the row
    count and the title's totals; ``modules`` / ``critical_path``: those sections too.
    ``lane_top_kernels`` counts the top ``top_kernels`` of each lane, as the full table does.
    A merged trace's ``groups`` come first and every row names its group (:func:`with_groups`)."""
    from ..query import metrics

    keys = _summary_keys(modules, critical_path)
    groups = metrics.groups(session)
    if rows is None:
        rows = default_rows(len(keys) + (len(groups) > 1))
    parts = {}
    for key in keys:
        sm = SUMMARIES[key]
        where = f"rank <= {int(top_kernels)}" if key == "lane_top_kernels" else None
        parts[key] = metrics.summary_rows(session, _METRIC[key], sm.order_by, rows, where, sm.sums)
    frames = with_groups({k: p.rows for k, p in parts.items()}, groups)
    if "groups" in frames:
        parts = {"groups": metrics.TopRows(groups, len(groups), {}), **parts}
        frames["groups"] = groups.head(rows)
    return {k: dataclasses.replace(parts[k], rows=frames[k]) for k in frames}


def _summary_keys(modules: bool, critical_path: bool) -> List[str]:
    """The sections :func:`summarize` shows (``groups`` aside)."""
    return [k for k in SECTIONS if k not in ("groups", "modules", "module_kinds", "critical_paths")] + (
        ["module_kinds"] if modules else []) + (["critical_paths"] if critical_path else [])


def _summary_modules(keys: List[str]) -> List[str]:
    """The SQL modules the summary of ``keys`` reads: a metric's shortcut module where it has
    one (:data:`~perfetto_graph_ann.query.metrics.SHORTCUTS`), else its own."""
    from ..query import metrics

    names = ["groups", *(_METRIC[k] for k in keys)]
    return list(dict.fromkeys(metrics.SHORTCUTS[n].module if n in metrics.SHORTCUTS else metrics.METRICS[n].module
                              for n in names))


def format_summary(parts: Dict[str, "TopRows"], trace_start: Optional[int] = None,
                   width: Optional[int] = None) -> str:
    """:func:`summarize`'s sections as text: per section a title line (row count, totals),
    its rows in the columns of :data:`SUMMARIES` (:mod:`.tables`, as :func:`format_report`;
    as many as fit ``width`` in one block, so the line count does not depend on the terminal)
    and, when rows were left out, a line saying how many, which were shown, and how to get
    them all."""
    from .tables import format_duration, is_duration, render

    def total(column: str, v) -> str:
        if v is None:
            return f"{column} -"
        if is_duration(column):
            return f"{column} {format_duration(v)}"
        return f"{column} {v:,}" if isinstance(v, int) else f"{column} {v:,.4g}"

    out = []
    for key, part in parts.items():
        title, _ = SECTIONS[key]
        sm = SUMMARIES[key]
        df = part.rows
        head = f"{title}: {part.count:,} row{'' if part.count == 1 else 's'}"
        if part.sums and part.count:
            head += ", " + ", ".join(total(c, v) for c, v in part.sums.items()) + " in all"
        out.append(head)
        if df.empty:
            out.append("")
            continue
        columns = ["group", *sm.columns] if "group" in df.columns and key != "groups" else list(sm.columns)
        while True:  # one block: the last columns that do not fit the width are left out
            table = render(df, trace_start=trace_start, width=width, columns=columns).rstrip("\n")
            if "\n\n" not in table or len(columns) <= 2:
                break
            columns.pop()
        out.append(table)
        left = part.count - len(df)
        if left:
            out.append(f"  ({left:,} more; shown: {sm.order_text}; everything: --all or --format csv/json)")
        out.append("")
    if sum(ln.count("\n") + 1 for ln in out) + 2 > LINE_BUDGET:  # a merge, --by module and critical-path at once
        out = [ln for ln in out if ln]
    return "\n".join(out)


def with_groups(tables: Dict[str, "object"], groups) -> Dict[str, "object"]:
    """The report's tables for printing. A trace of one group (not a merge): without the
    ``group_id`` column, as they read before merged traces had groups. A merged trace: its
    ``groups`` table first, and next to each table's ``group_id`` a ``group`` column with the
    group's name (its root track, e.g. ``eager (rank 0)``), which the table view shows."""
    if len(groups) <= 1:
        return {k: df.drop(columns=["group_id"]) if "group_id" in df.columns else df for k, df in tables.items()}
    names = dict(zip(groups["group_id"].tolist(), groups["name"].tolist()))
    out: Dict[str, "object"] = {"groups": groups}
    for key, df in tables.items():
        if "group_id" in df.columns:
            df = df.copy()
            df.insert(list(df.columns).index("group_id") + 1, "group",
                      [names.get(g, str(g)) for g in df["group_id"].tolist()])
        out[key] = df
    return out


def _open_json(args: argparse.Namespace, progress):
    """A session on the torch.profiler JSON trace, joined to --annotations (if any) and
    converted with only the args the SQL modules read."""
    with progress.phase(f"reading {os.path.basename(args.trace)}"):  # pandas: inside the phase (see _report)
        from ..pipeline.query import open_json

    return open_json(args.trace, args.annotations, args.graph_lanes, args.force_annotations, engine=args.engine,
                     sql_args_only=True, progress=progress,
                     on_join=None if args.quiet else lambda layout: print_join_summary(layout.report))
