"""``perfetto-graph-ann report TRACE``: the ``graph_ann`` SQL metrics as tables.

Prints per-lane utilization and duration percentiles, the top kernels per lane, CUDA
graph replays, collectives with their bandwidths, compute/communication overlap and idle
gaps per lane. TRACE is a trace written by this package (.pftrace); a torch.profiler JSON
trace is converted first (with --annotations, joined to them).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from typing import Dict, List, Tuple

from ._common import ENGINES, GRAPH_LANES_HELP, add_force_option, positive_int, read_and_join, write_output

#: Section title and the columns the table view shows (``--format csv/json`` give all).
SECTIONS: Dict[str, Tuple[str, List[str]]] = {
    "lane_summary": ("Lanes (graph_ann_lane)", [
        "device", "lane_id", "lane_name", "work_count", "busy_dur", "utilization", "replay_utilization",
        "mean_dur", "p50_dur", "p90_dur", "p99_dur", "max_dur"]),
    "lane_top_kernels": ("Top kernels per lane (graph_ann_lane_top_kernels)", [
        "device", "lane_id", "rank", "name", "count", "total_dur", "share"]),
    "replays": ("Graph replays (graph_ann_replay)", [
        "device", "replay_index", "correlation", "graph_id", "replay", "work_count", "wall_dur", "busy_dur",
        "launch_overhead_dur"]),
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
}

_RATIO_COLUMNS = {"utilization", "replay_utilization", "share", "comm_overlap_fraction", "busy_fraction"}


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("report", help="lane, replay, collective and overlap metrics of a trace (graph_ann SQL)",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("trace", help=".pftrace written by this package, or a torch.profiler JSON trace (.json, .json.gz)")
    p.add_argument("--annotations", "-a", action="append", default=[], metavar="FILE",
                   help="for a JSON trace: annotation sidecar or capture record to join (repeatable)")
    p.add_argument("--graph-lanes", choices=("all", "none"), default=None,
                   help="for a JSON trace with --annotations: " + GRAPH_LANES_HELP)
    add_force_option(p)
    p.add_argument("--top", type=positive_int, default=5, metavar="N", help="top N kernels per lane (default: 5)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table: readable (times in µs, ratios in %%); csv / json: every column, raw units (ns)")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="trace processor to use (default: auto)")
    p.add_argument("-o", "--output", default=None, help="write to this file (atomically) instead of stdout")
    p.set_defaults(func=run)
    return p


#: Protobuf names: these and JSON names (util.names) say what a file is; other names are sniffed.
_PROTO_SUFFIXES = (".pftrace", ".pftrace.gz", ".perfetto-trace", ".perfetto-trace.gz", ".pb", ".pb.gz")


def is_json_trace(path: str) -> bool:
    """Whether ``path`` holds JSON (plain or gzipped) rather than a protobuf trace.

    A protobuf trace starts with 0x0A (a TracePacket) and a length byte, which can be ``{``
    or ``[``: so the name decides where it says, and a sniff must also see JSON's next byte.
    """
    from ..errors import InputError
    from ..util.names import is_json_name

    if not os.path.exists(path):
        raise InputError(path, "file not found")
    if os.path.isdir(path):
        raise InputError(path, "is a directory, not a trace file")
    name = str(path).lower()
    if is_json_name(name):
        return True
    if name.endswith(_PROTO_SUFFIXES):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=f) as g:
                    head = g.read(64)
            else:
                head = f.read(64)
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except (OSError, EOFError) as e:
        raise InputError(path, f"cannot read: {e}") from e
    text = head.lstrip(b" \t\r\n")
    if text[:1] == b"{":
        return len(text) == 1 or text[1:2] in b' \t\r\n"}'
    if text[:1] == b"[":
        return len(text) == 1 or text[1:2] in b" \t\r\n{]"
    return False


def format_report(tables: Dict[str, "object"], fmt: str = "table") -> str:
    """Render :func:`perfetto_graph_ann.query.metrics.report`'s tables as text."""
    if fmt == "json":
        return json.dumps({k: json.loads(v.to_json(orient="records")) for k, v in tables.items()}, indent=1) + "\n"
    parts = []
    for key, df in tables.items():
        title, columns = SECTIONS[key]
        if fmt == "csv":
            parts.append(f"# {key}\n" + df.to_csv(index=False))
            continue
        parts.append(title)
        if df.empty:
            parts.append("  (none)\n")
            continue
        view = df[[c for c in columns if c in df.columns]].copy()
        for c in view.columns:
            if c in _RATIO_COLUMNS:
                view[c] = [_fmt_ratio(v) for v in view[c]]
            elif c.endswith("_dur") or c == "dur":
                view[c] = [_fmt_us(v) for v in view[c]]
            elif c.endswith("_gbps"):
                view[c] = ["" if _isnull(v) else f"{float(v):.2f}" for v in view[c]]
            elif c == "name":
                view[c] = ["" if _isnull(v) else _shorten(str(v)) for v in view[c]]
            else:
                view[c] = ["" if _isnull(v) else str(v) for v in view[c]]
        view.columns = [_header(c) for c in view.columns]
        parts.append(view.to_string(index=False, na_rep="") + "\n")
    return "\n".join(parts)


def _isnull(v) -> bool:
    import pandas as pd

    return v is None or bool(pd.isna(v))


def _fmt_us(v) -> str:
    """ns -> µs with 3 decimals (exact for integer ns)."""
    if _isnull(v):
        return ""
    if float(v).is_integer():
        n = int(v)
        sign = "-" if n < 0 else ""
        return f"{sign}{abs(n) // 1000}.{abs(n) % 1000:03d}"
    return f"{float(v) / 1000:.3f}"


def _shorten(text: str, width: int = 72) -> str:
    """Kernel names can be kilobytes of C++ templates: keep the table readable."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _fmt_ratio(v) -> str:
    return "" if _isnull(v) else f"{100 * float(v):.1f}%"


def _header(c: str) -> str:
    if c.endswith("_dur") or c == "dur":
        return f"{c} (µs)"
    return c


def run(args: argparse.Namespace) -> int:
    from ..query import metrics
    from ..query.session import open_converted, open_trace
    from ..util.atomic import refuse_input_as_output

    refuse_input_as_output(args.output, [args.trace, *args.annotations])
    if is_json_trace(args.trace):
        session = open_converted(*read_and_join(args.trace, args.annotations, args.graph_lanes,
                                                args.force_annotations), engine=args.engine)
    else:
        if args.annotations:
            print("perfetto-graph-ann report: note: --annotations only apply to JSON traces; ignored", file=sys.stderr)
        session = open_trace(args.trace, engine=args.engine)
    with session as s:
        tables = metrics.report(s, top=args.top)
    text = format_report(tables, args.format)
    if args.format == "table":
        text = f"{args.trace}\n\n{text}"
    write_output(text, args.output)
    return 0
