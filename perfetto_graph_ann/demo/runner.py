"""The demo pipeline: recordings -> raw and annotated ``.pftrace`` -> lane table, join report, SQL.

For each :class:`~.recordings.Recording`: read the Kineto trace, export it raw, join it with
its annotations (``graph_lanes="all"``), export it annotated, print the kernels-per-lane
table before/after and the join report (the ``lanes`` command's printer), then load the
annotated trace in a trace processor and print the ``graph_ann`` lane summary. Everything
written goes into ``out_dir``; ``summary.json`` holds the numbers for scripts and tests.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import IO, Any, Dict, List, Optional, Tuple

from ..errors import EngineNotFoundError, OutputError, PathLike
from ..util.atomic import atomic_write_bytes
from .recordings import Recording, shipped_recordings

__all__ = ["choose_recordings", "COLLECTIVE_FIELDS", "DemoConfig", "DemoResult", "load_any_annotations", "MODES",
           "run_demo", "run_scenario", "ScenarioResult", "sql_lane_summary", "SUMMARY_COLUMNS"]

#: Columns of graph_ann's lane summary that the demo prints (summary.json has them all).
SUMMARY_COLUMNS = ("device", "lane_id", "lane_name", "work_count", "busy_dur", "utilization", "p50_dur",
                   "p90_dur", "max_dur")
#: "auto": live capture when CUDA is there, else the shipped recordings.
MODES = ("auto", "live", "shipped")


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """What the demo runs and where it writes.

    ``mode``: ``"auto"`` (live with CUDA, else shipped), ``"live"`` (needs CUDA), ``"shipped"``.
    ``engine``: trace processor for the SQL step (``open_trace``'s ``engine``); ``sql=False``
    skips that step.
    """

    out_dir: PathLike = "demo_out"
    mode: str = "auto"
    replays: int = 5
    engine: str = "auto"
    sql: bool = True


@dataclasses.dataclass
class ScenarioResult:
    name: str
    title: str
    raw_trace: Path
    annotated_trace: Optional[Path]
    lanes: Any  #: DataFrame (device, lane, name, before, after): join.summary.lane_table
    report: Optional[Dict[str, Any]]  #: JoinReport.as_dict(); None when not joined
    report_table: Any = None  #: DataFrame (join, events): join.summary.report_table
    reference_trace: Optional[Path] = None
    lane_summary: Any = None  #: DataFrame from graph_ann's lane summary, when SQL ran
    #: collective fields the join put on the first graphed NCCL kernel (None: no such kernel)
    restored_collective: Optional[Dict[str, Any]] = None
    #: with a reference: (label, the first NCCL kernel's collective fields as recorded, None: no
    #: NCCL kernel) for the reference (eager) and the recorded (graphed) trace
    recorded_collectives: Tuple[Tuple[str, Optional[Dict[str, Any]]], ...] = ()

    def as_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "raw_trace": str(self.raw_trace),
            "annotated_trace": str(self.annotated_trace) if self.annotated_trace else None,
            "reference_trace": str(self.reference_trace) if self.reference_trace else None,
            "lanes": json.loads(self.lanes.to_json(orient="records")),
            "join_report": self.report,
            "restored_collective": self.restored_collective,
            "lane_summary": (json.loads(self.lane_summary.to_json(orient="records"))
                             if self.lane_summary is not None else None),
        }


@dataclasses.dataclass
class DemoResult:
    source: str  #: "live" or "shipped"
    origin: str  #: the one line saying where the recordings come from
    scenarios: List[ScenarioResult]
    out_dir: Path


def choose_recordings(config: DemoConfig, out_dir: Path) -> Tuple[str, str, List[Recording]]:
    """(source, one-line origin, recordings) for ``config.mode``."""
    if config.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {config.mode!r}")
    from .scenarios import cuda_device_count

    devices = 0 if config.mode == "shipped" else cuda_device_count()
    if devices == 0:
        if config.mode == "live":
            from ..errors import CaptureError

            raise CaptureError("demo --live: no CUDA device is usable here (torch missing or without CUDA)")
        origin, recs = shipped_recordings()
        return "shipped", origin, recs
    from .scenarios import live_recordings

    recs = live_recordings(out_dir, config.replays, devices)
    extra = "" if devices >= 2 else "; the all_reduce scenario needs 2 or more GPUs and was skipped"
    return "live", f"live capture on {devices} CUDA device(s) with this package's API{extra}", recs


def run_scenario(rec: Recording, out_dir: Path, config: DemoConfig) -> ScenarioResult:
    """Export ``rec`` raw and annotated and compute its lane numbers (no printing)."""
    from ..join import LaneLayout
    from ..join.summary import lane_table, report_table
    from ..pipeline.convert import convert, write_joined
    from ..read.kineto import read_trace

    trace = read_trace(rec.trace)
    raw_out = out_dir / f"{rec.name}.raw.pftrace"
    convert(trace, raw_out)
    reference_out = None
    recorded: Tuple[Tuple[str, Optional[Dict[str, Any]]], ...] = ()
    if rec.reference is not None:
        reference = read_trace(rec.reference)
        reference_out = out_dir / f"{rec.name}.reference.pftrace"
        convert(reference, reference_out)
        recorded = (("eager", _collective_fields(reference, None)),
                    ("graphed (as recorded)", _collective_fields(trace, None)))
    if rec.annotations is None:
        return ScenarioResult(rec.name, rec.title, raw_out, None, lane_table(trace, LaneLayout()), None,
                              reference_trace=reference_out, recorded_collectives=recorded)
    ann_out = out_dir / f"{rec.name}.annotated.pftrace"
    layout = write_joined(trace, str(ann_out), load_any_annotations(rec.annotations), graph_lanes="all")
    return ScenarioResult(rec.name, rec.title, raw_out, ann_out, lane_table(trace, layout),
                          layout.report.as_dict(), report_table(layout), reference_out,
                          restored_collective=_restored_collective(trace, layout), recorded_collectives=recorded)


def _restored_collective(trace, layout) -> Optional[Dict[str, Any]]:
    """The collective fields the join adds to the first NCCL kernel, if the trace has one."""
    return _collective_fields(trace, layout)


def _collective_fields(trace, layout) -> Optional[Dict[str, Any]]:
    """The first NCCL kernel's collective fields: from the join's args with ``layout``, else as
    recorded in the trace; None when the trace has no NCCL kernel."""
    for e in trace.gpu_work():
        if e.name.startswith("nccl"):
            if layout is None:
                args = e.args
            else:
                placement = layout.placements.get(e.index)
                args = placement.args if placement is not None else {}
            return {k: args[k] for k in COLLECTIVE_FIELDS if k in args}
    return None


def load_any_annotations(path: Path):
    """A sidecar written by ``save_annotations``, or a probe capture record (the shipped ones)."""
    from ..annotations.files import load_annotation_files

    return load_annotation_files([path])


def sql_lane_summary(trace: Path, engine: str):
    """The ``graph_ann`` lane summary of one trace, as a DataFrame (the demo's traces are not
    merges: no ``group_id`` column)."""
    from ..query.metrics import lane_summary, without_group

    return without_group(lane_summary(trace, engine=engine))


def run_demo(config: DemoConfig = DemoConfig(), out: IO[str] = sys.stdout) -> DemoResult:
    """Run every scenario, print as it goes, write ``summary.json``; returns the numbers."""
    out_dir = Path(config.out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(out_dir, f"cannot create the output folder: {e.strerror or e}") from e
    source, origin, recordings = choose_recordings(config, out_dir)
    print(origin, file=out)
    results: List[ScenarioResult] = []
    no_engine: Optional[EngineNotFoundError] = None
    for rec in recordings:
        print(f"\n== {rec.name}: {rec.title}", file=out)
        r = run_scenario(rec, out_dir, config)
        _print_scenario(rec, r, out)
        if config.sql and r.annotated_trace is not None:
            if no_engine is not None:  # asked once: a missing engine does not appear later in the run
                print("SQL lane summary skipped: no trace processor here (see above)", file=out)
                results.append(r)
                continue
            try:
                r.lane_summary = sql_lane_summary(r.annotated_trace, config.engine)
            except EngineNotFoundError as e:  # the traces are written; only the SQL step needs an engine
                no_engine = e
                print(f"SQL lane summary skipped: no trace processor here ({e})", file=out)
            else:
                from ..util.tables import render

                print("SQL lane summary (graph_ann.lanes)", file=out)
                cols = [c for c in SUMMARY_COLUMNS if c in r.lane_summary.columns] or list(r.lane_summary.columns)
                print(render(r.lane_summary, columns=cols).rstrip("\n"), file=out)
        results.append(r)
    summary = {"source": source, "origin": origin, "scenarios": [r.as_json() for r in results]}
    atomic_write_bytes(out_dir / "summary.json", json.dumps(summary, indent=1, default=str).encode("utf-8"))
    print(f"\nwrote {len(results)} scenario(s) to {out_dir}/ (open one with: perfetto-graph-ann open "
          f"{results[0].annotated_trace or results[0].raw_trace})" if results else "", file=out)
    return DemoResult(source, origin, results, out_dir)


def _print_scenario(rec: Recording, r: ScenarioResult, out: IO[str]) -> None:
    """The ``lanes`` command's tables: GPU work per lane before/after, then the join report."""
    label = "GPU work per lane (graph_lanes=all)" if r.report is not None else "GPU work per stream (not joined)"
    print(label, file=out)
    for device, rows in r.lanes.groupby("device", sort=True):
        print(f"GPU {device}", file=out)
        print(rows.drop(columns=["device"]).to_string(index=False), file=out)
    if r.report_table is not None:
        print(r.report_table.to_string(index=False), file=out)
    if rec.note:
        print(f"note: {rec.note}", file=out)
    for label, fields in r.recorded_collectives:  # the reference (eager) and the graphed trace as recorded
        if fields is None:
            print(f"{label}: no NCCL kernel", file=out)
        else:
            print(f"{label} NCCL kernel args: {fields if fields else 'no collective fields'}", file=out)
    if r.restored_collective is not None:
        fields = r.restored_collective or "none (no annotation reached the NCCL node)"
        print(f"graphed NCCL kernel args after the join: {fields}", file=out)
    written = [p for p in (r.raw_trace, r.annotated_trace, r.reference_trace) if p is not None]
    print("wrote " + ", ".join(p.name for p in written), file=out)


#: The eager fields torch.profiler puts on NCCL kernels (and our annotation restores).
COLLECTIVE_FIELDS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                     "In split size", "Out split size", "Process Group Name", "Process Group Description",
                     "Process Group Ranks")
