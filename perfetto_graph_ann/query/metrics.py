"""The ``graph_ann`` SQL metrics as pandas DataFrames.

Each function takes a trace (a path, opened and closed for the call, or an open
:class:`~perfetto_graph_ann.query.session.Session`, reused) and returns the rows of one
table of the ``sql/graph_ann`` package. The SQL is the single source of the numbers;
this module only includes the right module and selects the table. The trace is best our
.pftrace; torch.profiler / annotated Chrome JSON works too (the SQL falls back to
``args.*``), except that Perfetto's JSON importer drops events overlapping on a thread.

    from perfetto_graph_ann.query import metrics
    with open_trace("run.pftrace") as s:
        lanes = metrics.lane_summary(s)
        comm = metrics.collectives(s)

Times are integer nanoseconds on the trace clock; ratios are fractions (0..1).

A merged trace (``perfetto-graph-ann merge``) holds several groups (ranks, or labelled
traces) whose device, lane and correlation ids repeat: every table has a ``group_id``
column (0 for a trace that is not a merge; :func:`groups` names them) and keeps its groups
apart.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Dict, Iterator, Optional, Sequence, Tuple, Union

from .session import Session, open_trace

__all__ = ["collectives", "gpu_work", "graph_replays", "groups", "lane_gaps", "lane_idle", "lane_summary",
           "lane_top_kernels", "Metric", "METRICS", "module_instances", "module_kinds", "module_summary", "overlap",
           "query_metric", "replay_lanes", "replays", "report", "scope_instances", "scope_slowest", "scope_summary",
           "Shortcut", "SHORTCUTS", "summary_rows", "TraceArg", "without_group"]

TraceArg = Union[str, "os.PathLike[str]", Session]


@dataclasses.dataclass(frozen=True)
class Metric:
    """One public table of the package: the module that defines it and its sort order."""

    module: str
    table: str
    order_by: str


#: Every table the wrappers expose, by wrapper name.
METRICS: Dict[str, Metric] = {
    "groups": Metric("graph_ann.groups", "graph_ann_group", "group_id"),
    "gpu_work": Metric("graph_ann.gpu_work", "graph_ann_gpu_work", "ts, id"),
    "lane_summary": Metric("graph_ann.lanes", "graph_ann_lane", "group_id, device, lane_id"),
    "lane_top_kernels": Metric("graph_ann.lanes", "graph_ann_lane_top_kernels", "group_id, device, lane_id, rank"),
    "replays": Metric("graph_ann.replays", "graph_ann_replay", "group_id, device, ts"),
    "replay_lanes": Metric("graph_ann.replays", "graph_ann_replay_lane", "group_id, device, ts, lane_id"),
    "collectives": Metric("graph_ann.collectives", "graph_ann_collective", "group_id, device, ts, id"),
    "overlap": Metric("graph_ann.overlap", "graph_ann_overlap", "group_id, device"),
    "lane_idle": Metric("graph_ann.lane_idle", "graph_ann_lane_idle", "group_id, device, lane_id"),
    "lane_gaps": Metric("graph_ann.lane_idle", "graph_ann_lane_gap", "group_id, device, lane_id, ts"),
    "graph_replays": Metric("graph_ann.scopes", "graph_ann_graph_replay", "group_id, device, ts, id"),
    "scope_summary": Metric("graph_ann.scope_stats", "graph_ann_scope_stats",
                            "group_id, graph_id, first_ts, depth, scope_path"),
    "scope_instances": Metric("graph_ann.scope_stats", "graph_ann_scope_instance", "group_id, device, ts, depth, id"),
    "scope_slowest": Metric("graph_ann.scope_stats", "graph_ann_scope_slowest", "dur DESC, id"),
    "module_summary": Metric("graph_ann.modules", "graph_ann_module_summary",
                             "group_id, graph_id, mean_total_dur DESC, module_path"),
    "module_instances": Metric("graph_ann.modules", "graph_ann_module_instance", "group_id, device, ts, depth, id"),
    "module_kind_summary": Metric("graph_ann.modules", "graph_ann_module_kind",
                                  "group_id, graph_id, mean_self_dur DESC, kind_path"),
    "critical_path": Metric("graph_ann.critical_path", "graph_ann_critical_path", "group_id, device, ts"),
    "critical_path_items": Metric("graph_ann.critical_path", "graph_ann_critical_path_item", "launch_id, position"),
    "critical_path_scopes": Metric("graph_ann.critical_path", "graph_ann_critical_path_scope",
                                   "launch_id, share_dur DESC, slack_dur"),
    "critical_path_lanes": Metric("graph_ann.critical_path", "graph_ann_critical_path_lane",
                                  "launch_id, share_dur DESC, slack_dur"),
    "critical_path_summary": Metric("graph_ann.critical_path", "graph_ann_critical_path_scope_summary",
                                    "group_id, device, graph_id, mean_share_dur DESC, scope"),
}


@contextlib.contextmanager
def _session(trace: TraceArg, engine: str) -> Iterator[Session]:
    """Use an open session as is; open (and afterwards close) one for a path."""
    if isinstance(trace, Session):
        yield trace
        return
    with open_trace(trace, engine=engine) as s:
        yield s


def query_metric(trace: TraceArg, name: str, where: Optional[str] = None, engine: str = "auto"):
    """Rows of the metric ``name`` (a key of :data:`METRICS`) as a DataFrame.

    ``where``: an optional SQL condition on the table's columns, e.g. ``"rank <= 5"``.
    """
    with _session(trace, engine) as s:
        return _select(s, name, where)


def _select(s: Session, name: str, where: Optional[str] = None):
    """The rows of metric ``name`` on ``s``."""
    m = METRICS[name]
    sql = f"INCLUDE PERFETTO MODULE {m.module}; SELECT * FROM {m.table}"
    if where:
        sql += f" WHERE {where}"
    sql += f" ORDER BY {m.order_by}"
    return _frame(s.query(sql))


def _frame(result):
    """A DataFrame keeping integer columns exact: nullable ``Int64`` where a column mixes
    integers and NULL (pandas would otherwise turn it into float64 with NaN)."""
    import pandas as pd

    data = {}
    for name in result.columns:
        values = [getattr(r, name) for r in result.rows]
        present = [v for v in values if v is not None]
        if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            data[name] = pd.array(values, dtype="Int64")
        elif present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            data[name] = pd.array([float("nan") if v is None else float(v) for v in values], dtype="float64")
        else:
            data[name] = pd.array(values, dtype="object")
    return pd.DataFrame(data, columns=list(result.columns))


def groups(trace: TraceArg, engine: str = "auto"):
    """The groups of the trace: one row per input of a merged trace (``group_id``, the group
    track's ``name``, ``rank``, ``label``), one row (group 0, NULL name) for any other trace."""
    return query_metric(trace, "groups", engine=engine)


def without_group(df):
    """``df`` without its ``group_id`` column when every row is group 0 (a trace that is not a
    merge): the table as it reads without groups. Other frames are returned as they are."""
    if "group_id" in df.columns and bool((df["group_id"] == 0).all()):
        return df.drop(columns=["group_id"])
    return df


def gpu_work(trace: TraceArg, engine: str = "auto"):
    """One row per kernel / memcpy / memset: lane, streams, annotation, replay, graph node."""
    return query_metric(trace, "gpu_work", engine=engine)


def lane_summary(trace: TraceArg, engine: str = "auto"):
    """Per device and lane: work count, busy time (union), utilization, duration percentiles."""
    return query_metric(trace, "lane_summary", engine=engine)


def lane_top_kernels(trace: TraceArg, top: Optional[int] = None, engine: str = "auto"):
    """Kernels per lane ranked by total time with their share of the lane; ``top`` keeps the first N."""
    return query_metric(trace, "lane_top_kernels", where=_top_where(top), engine=engine)


def _top_where(top: Optional[int]) -> Optional[str]:
    return f"rank <= {int(top)}" if top is not None else None


def replays(trace: TraceArg, engine: str = "auto"):
    """Per CUDA graph replay: GPU start / end, wall time, busy time, launch overhead, and the
    graph name, candidates and replay slice where the trace has the projection."""
    return query_metric(trace, "replays", engine=engine)


def replay_lanes(trace: TraceArg, engine: str = "auto"):
    """Per replay and lane: work count and busy time."""
    return query_metric(trace, "replay_lanes", engine=engine)


def collectives(trace: TraceArg, engine: str = "auto"):
    """Per collective kernel: collective, dtype, sizes, group, algbw and busbw (nccl-tests factors)."""
    return query_metric(trace, "collectives", engine=engine)


def overlap(trace: TraceArg, engine: str = "auto"):
    """Per device: compute, communication, overlapped and exposed communication, idle time."""
    return query_metric(trace, "overlap", engine=engine)


def lane_idle(trace: TraceArg, engine: str = "auto"):
    """Per lane: idle time between its first and last work, gap count, longest gap."""
    return query_metric(trace, "lane_idle", engine=engine)


def lane_gaps(trace: TraceArg, engine: str = "auto"):
    """Every idle gap of every lane (start and length)."""
    return query_metric(trace, "lane_gaps", engine=engine)


def graph_replays(trace: TraceArg, engine: str = "auto"):
    """Deprecated (until 0.2; :func:`replays` is the one replay table): per projected graph
    replay, :func:`replays`' rows under their earlier names (``dur``, ``kernel_count``,
    ``launch_latency``)."""
    return query_metric(trace, "graph_replays", engine=engine)


def scope_summary(trace: TraceArg, engine: str = "auto"):
    """Per scope (graph and scope path, e.g. ``layer 3 / attn``) across replays: instance count,
    kernel count, mean / p50 / p90 / max span and mean busy time."""
    return query_metric(trace, "scope_summary", engine=engine)


def scope_instances(trace: TraceArg, engine: str = "auto"):
    """Every scope instance of every replay: span, busy time, kernel count, depth."""
    return query_metric(trace, "scope_instances", engine=engine)


def scope_slowest(trace: TraceArg, top: Optional[int] = None, engine: str = "auto"):
    """Scope instances, slowest span first, with their rank in their scope and span / median;
    ``top`` keeps the first N."""
    m = METRICS["scope_slowest"]
    with _session(trace, engine) as s:
        sql = f"INCLUDE PERFETTO MODULE {m.module}; SELECT * FROM {m.table} ORDER BY {m.order_by}"
        if top is not None:
            sql += f" LIMIT {int(top)}"
        return _frame(s.query(sql))


def module_summary(trace: TraceArg, engine: str = "auto"):
    """Per module path and graph across replays (module scopes: ``pga.instrument(modules=True)``,
    ``perfetto-graph-ann run --modules``, ``pga.mark_modules``): mean total time (submodules
    included), mean self time, share of the replay, kernel count, depth."""
    return query_metric(trace, "module_summary", engine=engine)


def module_kinds(trace: TraceArg, engine: str = "auto"):
    """Per module kind and graph across replays: the module paths with their layer (or any
    all-digit) indices as ``*`` (``model.layers.*.mlp``) taken together, so the same module of
    every layer is one row: summed total and self time, their shares of the replay, kernel
    count, how many modules. Largest self time first."""
    return query_metric(trace, "module_kind_summary", engine=engine)


def module_instances(trace: TraceArg, engine: str = "auto"):
    """Every module call of every replay: path, class, depth, span, total and self time, share."""
    return query_metric(trace, "module_instances", engine=engine)


def critical_path(trace: TraceArg, engine: str = "auto"):
    """Per graph replay: its critical path (launch start to last end), where it comes from
    (``edges_source``: ``edges`` recorded at capture, else ``stream order``), its waits, the
    scope with the largest share and the least slack of the scopes off the path."""
    return query_metric(trace, "critical_path", engine=engine)


def critical_path_items(trace: TraceArg, engine: str = "auto"):
    """Every item of every replay's critical path, first to last: wait before it and share of the path."""
    return query_metric(trace, "critical_path_items", engine=engine)


def critical_path_scopes(trace: TraceArg, engine: str = "auto"):
    """Per replay and scope (annotation name): share of the critical path and slack."""
    return query_metric(trace, "critical_path_scopes", engine=engine)


def critical_path_lanes(trace: TraceArg, engine: str = "auto"):
    """Per replay and lane: share of the critical path and slack."""
    return query_metric(trace, "critical_path_lanes", engine=engine)


def critical_path_summary(trace: TraceArg, engine: str = "auto"):
    """Per graph and scope across replays: replays it bounds, mean share of the path, slack."""
    return query_metric(trace, "critical_path_summary", engine=engine)


def report(trace: TraceArg, top: int = 5, engine: str = "auto", modules: bool = False,
           critical_path: bool = False) -> Dict[str, "object"]:
    """All report tables from one session: ``{name: DataFrame}`` in print order (each with
    its ``group_id``; :func:`groups` names the groups). ``modules``: also the module tables
    (per path, ``modules``; per kind across layers, ``module_kinds``);
    ``critical_path``: also the critical path per graph and scope (``critical_paths``)."""
    with _session(trace, engine) as s:
        out = {
            "lane_summary": _select(s, "lane_summary"),
            "lane_top_kernels": _select(s, "lane_top_kernels", _top_where(top)),
            "replays": _select(s, "replays"),
            "collectives": _select(s, "collectives"),
            "overlap": _select(s, "overlap"),
            "lane_idle": _select(s, "lane_idle"),
            "scopes": _select(s, "scope_summary"),
        }
        if modules:
            out["modules"] = _select(s, "module_summary")
            out["module_kinds"] = _select(s, "module_kind_summary")
        if critical_path:
            out["critical_paths"] = _select(s, "critical_path_summary")
        return out


@dataclasses.dataclass(frozen=True)
class TopRows:
    """The first rows of a table in a chosen order, with its row count and column sums."""

    rows: "object"  #: DataFrame of at most ``limit`` rows
    count: int  #: rows of the whole table (after ``where``)
    sums: Dict[str, Optional[float]]  #: SUM of each asked column over the whole table (None: all NULL)


def top_rows(trace: TraceArg, name: str, order_by: str, limit: int, where: Optional[str] = None,
             sums: Sequence[str] = (), engine: str = "auto") -> TopRows:
    """The first ``limit`` rows of metric ``name`` (a key of :data:`METRICS`) in ``order_by``
    (SQL, e.g. ``"wall_dur DESC"``; the table's own order breaks ties), with the table's row
    count and the SUM of each column of ``sums``: a summary read without fetching every row."""
    m = METRICS[name]
    cond = f" WHERE {where}" if where else ""
    with _session(trace, engine) as s:
        agg = ", ".join(["COUNT(*) AS n", *(f"SUM({c}) AS s{i}" for i, c in enumerate(sums))])
        row = s.query(f"INCLUDE PERFETTO MODULE {m.module}; SELECT {agg} FROM {m.table}{cond}").tuples()[0]
        rows = _frame(s.query(f"INCLUDE PERFETTO MODULE {m.module}; SELECT * FROM {m.table}{cond} "
                              f"ORDER BY {order_by}, {m.order_by} LIMIT {int(limit)}"))
    return TopRows(rows, int(row[0]), dict(zip(sums, row[1:])))


@dataclasses.dataclass(frozen=True)
class Shortcut:
    """A cheaper way to a metric's summary (:func:`summary_rows`) than its full table: a table
    with one row per row of the metric holding its order and summed columns, and a macro
    giving the metric's columns for a few of those rows."""

    module: str  #: the module defining both (instead of the metric's own)
    table: str  #: one row per row of the metric
    order_by: str  #: the metric's table order on ``table``'s columns (ties broken by a unique key)
    rows: str  #: macro: the metric's rows (its columns the summary shows, at least) for rows of ``table``
    exact: Optional[str] = None  #: SQL of one boolean: whether ``table`` is exact for this trace


#: The metrics whose summary does not need their full table, by :data:`METRICS` name.
SHORTCUTS: Dict[str, Shortcut] = {
    "replays": Shortcut("graph_ann.report_summary", "_graph_ann_replay_extent", "group_id, device, ts, launch_id",
                        "_graph_ann_replay_summary_rows",
                        "SELECT exact FROM _graph_ann_summary_exact WHERE section = 'replays'"),
    "collectives": Shortcut("graph_ann.collective_rows", "_graph_ann_collective_kernel", "group_id, device, ts, id",
                            "_graph_ann_collective_rows"),
    "lane_idle": Shortcut("graph_ann.report_summary", "_graph_ann_lane_idle_extent", "group_id, device, lane_id",
                          "_graph_ann_lane_idle_summary_rows",
                          "SELECT exact FROM _graph_ann_summary_exact WHERE section = 'lane_idle'"),
}


def summary_rows(trace: TraceArg, name: str, order_by: str, limit: int, where: Optional[str] = None,
                 sums: Sequence[str] = (), engine: str = "auto") -> TopRows:
    """:func:`top_rows` of metric ``name`` (same rows, count and sums), computed without the
    metric's full table where it has a :data:`SHORTCUTS` entry that is exact for the trace (the
    report's summary of a large trace: the full replay, collective and idle tables cost
    seconds; their first rows and totals do not). Rows tied on ``order_by`` and the metric's
    own order come in the order of a unique key; the columns may be fewer than the table's
    (those the summary shows are there)."""
    sc = SHORTCUTS.get(name)
    with _session(trace, engine) as s:
        if sc is None or where:
            return top_rows(s, name, order_by, limit, where, sums)
        s.query(f"INCLUDE PERFETTO MODULE {sc.module};")
        if sc.exact and not s.query(sc.exact).tuples()[0][0]:
            return top_rows(s, name, order_by, limit, where, sums)
        agg = ", ".join(["COUNT(*) AS n", *(f"SUM({c}) AS s{i}" for i, c in enumerate(sums))])
        row = s.query(f"SELECT {agg} FROM {sc.table}").tuples()[0]
        order = f"{order_by}, {sc.order_by}"
        keys = f"(SELECT * FROM {sc.table} ORDER BY {order} LIMIT {int(limit)})"
        rows = _frame(s.query(f"SELECT * FROM {sc.rows}!({keys}) ORDER BY {order}"))
    return TopRows(rows, int(row[0]), dict(zip(sums, row[1:])))
