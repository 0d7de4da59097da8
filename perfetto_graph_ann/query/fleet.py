"""``fleet_report``: many ranks' traces (one per rank, on one machine or a Ray cluster)
-> which rank is slow, and how long the others wait for it.

Each trace is one task (:mod:`.tasks`): converted with its sidecar when it is a
torch.profiler JSON, loaded in its own engine, queried for its ``graph_ann`` lanes and
collectives and its clock; the per-rank tables are combined in pandas
(:mod:`.straggler`, where every metric is defined).
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from ..errors import InputError, PathLike
from ..formats import (TRACE_SUFFIXES, SIDECAR_SUFFIXES, is_json_name, is_other_json, is_trace_name, run_sidecar,
                       trace_stem)
from .engine import EngineConfig
from .executors import RayOptions, run_tasks
from .straggler import FleetReport, RankTables, combine
from .tasks import Converter, FileInput, TraceTask, to_frame

__all__ = ["find_sidecar", "find_traces", "FLEET_QUERIES", "fleet_report", "name_rank"]

#: The per-rank queries. ``clock``: the offset from trace time to Unix time, from the
#: REALTIME (builtin clock 1) snapshot the converter writes (NULL without one).
FLEET_QUERIES = {
    "collectives": "INCLUDE PERFETTO MODULE graph_ann.collectives; "
                   "SELECT id, ts, dur, device, lane_id, name, is_graphed, has_metadata, collective, collective_type, "
                   "msg_bytes, group_size, pg_name, pg_desc, pg_ranks FROM graph_ann_collective ORDER BY ts, id",
    "lanes": "INCLUDE PERFETTO MODULE graph_ann.lanes; "
             "SELECT device, lane_id, lane_name, work_count, busy_dur, utilization FROM graph_ann_lane "
             "ORDER BY device, lane_id",
    "clock": "SELECT (SELECT clock_value - ts FROM clock_snapshot WHERE clock_id = 1 ORDER BY id LIMIT 1) "
             "AS realtime_offset",
    # a merged trace holds several groups (ranks, labels): not one rank's trace
    "groups": "INCLUDE PERFETTO MODULE graph_ann.groups; SELECT group_id, name FROM graph_ann_group ORDER BY group_id",
}

_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


def name_rank(path: Path) -> Optional[int]:
    """The rank a trace's file name gives (``rank3``, ``rank_3``, ``Rank-3``), or None: what
    names a rank whose trace has no ``distributedInfo.rank``."""
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def find_traces(inputs: Sequence[PathLike], skipped: Optional[List[Path]] = None) -> List[Path]:
    """The traces named by ``inputs``: files as given, folders searched (not recursively)
    for trace files, sidecars left out; sorted by name within a folder. A JSON file in a
    folder that is certainly no trace (an object without ``traceEvents``, e.g. the demo's
    ``summary.json``: :func:`~perfetto_graph_ann.formats.is_other_json`) is left out and
    appended to ``skipped``; a file named on its own is always kept (loading it says what is
    wrong with it)."""
    out: List[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = []
            for f in sorted((f for f in p.iterdir() if f.is_file() and is_trace_name(f.name)),
                            key=lambda f: _natural_key(f.name)):
                if is_json_name(f.name) and is_other_json(f):
                    if skipped is not None:
                        skipped.append(f)
                    continue
                found.append(f)
            if not found:
                raise InputError(p, f"holds no trace files ({', '.join(TRACE_SUFFIXES)})")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise InputError(p, "no such file or folder")
    return out


def _natural_key(name: str) -> Tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def find_sidecar(trace: Path) -> Optional[Path]:
    """The sidecar saved next to a torch.profiler JSON trace (``<stem>.annotations.json``,
    ``<stem>.pga``, ...), or None."""
    if not is_json_name(trace.name):
        return None
    stem = trace_stem(trace.name)
    for suffix in SIDECAR_SUFFIXES:
        cand = trace.with_name(stem + suffix)
        if cand.is_file() and cand != trace:
            return cand
    run = run_sidecar(trace)  # perfetto-graph-ann run's <host>_<pid>.pga
    return Path(run) if run is not None else None


def fleet_report(
    traces: Sequence[PathLike],
    annotations: Optional[Sequence[Any]] = None,
    executor: Any = "local",
    engine: str = "auto",
    config: Optional[EngineConfig] = None,
    max_workers: Optional[int] = None,
    progress: Optional[bool] = None,
    ray_address: Optional[str] = None,
    ray_options: Optional[RayOptions] = None,
    find_sidecars: bool = True,
    *,
    converter: Optional[Converter] = None,
) -> FleetReport:
    """The straggler report of one job's per-rank traces (files or folders of them).

    Args:
        traces: per-rank traces (Perfetto or torch.profiler JSON), or folders of them.
        annotations: per trace, a sidecar path (or a list, or None); by default
            (``find_sidecars``) each JSON trace's ``<stem>.annotations.json`` / ``.pga``
            beside it. A JSON trace is joined with its sidecar and converted on the worker
            (by ``converter``; ``perfetto_graph_ann.fleet_report`` gives the pipeline's).
        executor, engine, config, max_workers, progress, ray_address, ray_options: as in
            :func:`~perfetto_graph_ann.query.batch.query_many`.
        find_sidecars: look for each JSON trace's sidecar beside it.
        converter: the worker's conversion (internal).

    Returns:
        The :class:`FleetReport`: ranking, collective instances, arrivals, lanes. The rank
        of a trace is its ``distributedInfo.rank``, else the number after ``rank`` in its
        file name, else its position.

    Raises:
        InputError: two traces claim one rank, or some traces have an absolute clock
            (``baseTimeNanoseconds``) and others do not (their starts cannot be compared).
    """
    from .batch import annotation_inputs

    skipped: List[Path] = []
    paths = find_traces(traces, skipped)
    if annotations is None and find_sidecars:
        annotations = [find_sidecar(p) for p in paths]
    sidecars = annotation_inputs(annotations, len(paths))
    config = (config or EngineConfig()).with_engine(engine)
    tasks = [TraceTask(i, FileInput.of(p), FLEET_QUERIES, config, annotations=sidecars[i], convert=True,
                       arrow=executor != "local", converter=converter) for i, p in enumerate(paths)]
    opts = ray_options or RayOptions()
    if ray_address is not None:
        opts = dataclasses.replace(opts, address=ray_address)
    results = run_tasks(tasks, executor, max_workers, progress, opts, desc="fleet")
    report = combine(_rank_tables(paths, results))
    report.skipped = [str(p) for p in skipped]
    return report


def _rank_tables(paths: List[Path], results) -> List[RankTables]:
    ranks: List[RankTables] = []
    seen = {}
    offsets = []
    for i, (path, res) in enumerate(zip(paths, results)):
        rank = res.info.get("rank")
        if rank is None:
            rank = name_rank(path)
            rank = i if rank is None else rank
        groups = to_frame(res.tables["groups"])
        if len(groups) > 1:
            names = ", ".join(str(n) for n in groups["name"].tolist())
            raise InputError(path, f"is a merged trace of {len(groups)} groups ({names}): the fleet report compares "
                                   "one trace per rank; give it the ranks' own traces (or their .pftrace conversions)")
        if rank in seen:
            raise InputError(path, f"is rank {rank}, like {seen[rank]}: give each rank's trace once")
        seen[rank] = path
        clock = to_frame(res.tables["clock"])
        offset = clock["realtime_offset"].iloc[0] if len(clock) else None
        offsets.append((path, None if offset is None or offset != offset else int(offset)))
        ranks.append(RankTables(int(rank), str(path), 0, to_frame(res.tables["collectives"]),
                                to_frame(res.tables["lanes"]), res.info.get("host")))
    with_clock = [p for p, o in offsets if o is not None]
    if with_clock and len(with_clock) < len(offsets):
        missing = next(p for p, o in offsets if o is None)
        raise InputError(missing, f"has no absolute time (baseTimeNanoseconds), unlike {with_clock[0]}: "
                                  "its collective starts cannot be compared with the other ranks'")
    for rt, (_, offset) in zip(ranks, offsets):
        rt.offset_ns = offset or 0
    return ranks
