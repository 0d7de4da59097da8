"""``perfetto-graph-ann report TRACE``: the ``graph_ann`` SQL metrics as tables.

Prints per-lane utilization and duration percentiles, the top kernels per lane, CUDA
graph replays, collectives with their bandwidths, compute/communication overlap and idle
gaps per lane. TRACE is a trace written by this package (.pftrace); a torch.profiler JSON
trace is converted first (with --annotations, joined to them).

A merged trace's groups (ranks, --label) are kept apart: a groups table first, and every row
names its group (:func:`with_groups`).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
from typing import Dict, List, Optional, Tuple

from . import options
from ._common import CsvTables, note_annotations_ignored, open_session, print_join_summary, run_text_command

__all__ = ["format_report", "register", "run", "SECTIONS", "with_groups"]

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
    "critical_paths": ("Critical path, per graph and scope across replays (graph_ann_critical_path_scope_summary; "
                      "edges_source: edges recorded at capture, else stream order, which knows no dependency "
                      "between streams)", [
        "graph_id", "scope", "edges_source", "replay_count", "bound_count", "mean_share_dur", "mean_share_fraction",
        "min_slack_dur", "mean_slack_dur"]),
}


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("report", help="lane, replay, collective and overlap metrics of a trace (graph_ann SQL)",
                       description=__doc__.split("\n\n")[1],
                       parents=[*options.join(json_only=True), options.text_format(), options.engine(),
                                options.text_output(), options.verbosity(),
                                options.top("kernels", 5, "the N kernels with the most GPU time per lane")])
    p.add_argument("trace", help=".pftrace written by this package, or a torch.profiler JSON trace (.json, .json.gz)")
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

        # each module on its own first, so the progress line says which one runs
        include_modules(s, [metrics.METRICS[key].module for key in SECTIONS if key in metrics.METRICS], progress)
        with progress.phase("reading the report tables"):
            tables = with_groups(metrics.report(s, top=args.top_kernels, modules="module" in args.by,
                                                critical_path="critical-path" in args.by), metrics.groups(s))
        start = trace_start_ns(s) if args.format == "table" else None
    if args.format == "csv":
        return CsvTables(tables, [args.trace, *args.annotations])
    text = format_report(tables, args.format, start)
    if args.format == "table":
        text = f"{args.trace}\n\n{text}"
    return text


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
