"""The report summary's shortcuts (issue 33): ``metrics.summary_rows`` reads the replays,
collectives and idle gaps' first rows and totals without their full tables
(``graph_ann.report_summary``, ``graph_ann.collective_rows``). On every trace here its row
count, totals and rows (every column it gives) are those of the full table read in the same
order (``metrics.top_rows``), and each shortcut's guard says whether it was taken: traces
with a replay on two devices, negative durations or work without a lane must fall back to the
full table, and the others must not."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List

import pytest

from support import sql_synth
from support.engine_support import requires_portable
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.cli.report import SUMMARIES, _METRIC
from perfetto_graph_ann.pipeline.convert import convert
from perfetto_graph_ann.query import metrics
from perfetto_graph_ann.query.session import open_trace

pytestmark = requires_portable

_SECTION = {m: k for k, m in _METRIC.items()}


def _same(a, b) -> bool:
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    if isinstance(a, float) or isinstance(b, float):
        return b is not None and not (isinstance(b, float) and math.isnan(b)) and a == pytest.approx(b, rel=1e-12)
    return a == b


def _cell(v):
    return None if v is None or v is getattr(__import__("pandas"), "NA") else v


def _compare(trace: Path, exact: Dict[str, bool], limits=(1, 2, 3, 1000)) -> Dict[str, int]:
    """Every shortcut's summary against the full table's, at each of ``limits`` rows;
    ``exact``: whether each shortcut's guard lets it answer on this trace. Returns each
    table's row count."""
    counts = {}
    with open_trace(trace, engine="portable") as s:
        for name, sc in metrics.SHORTCUTS.items():
            sm = SUMMARIES[_SECTION[name]]
            s.query(f"INCLUDE PERFETTO MODULE {sc.module};")
            if sc.exact:
                assert bool(s.query(sc.exact).tuples()[0][0]) == exact[name], name
            order = f"{sm.order_by}, {sc.order_by}"  # the full table in the same order, ties too
            for limit in limits:
                fast = metrics.summary_rows(s, name, sm.order_by, limit, None, sm.sums)
                full = metrics.top_rows(s, name, order, limit, None, sm.sums)
                assert fast.count == full.count, name
                counts[name] = full.count
                assert fast.sums == full.sums, name
                assert len(fast.rows) == len(full.rows) == min(limit, full.count), name
                assert set(sm.columns) <= set(fast.rows.columns), name
                for col in fast.rows.columns:
                    got = [_cell(v) for v in fast.rows[col].tolist()]
                    want = [_cell(v) for v in full.rows[col].tolist()]
                    assert all(_same(g, w) for g, w in zip(got, want)), (name, limit, col, got, want)
    return counts


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """The 60,000-event synthetic trace (``benchmarks/synth.py``) as a .pftrace, and the merge of
    two copies (two groups)."""
    from benchmarks.synth import write_trace

    tmp = tmp_path_factory.mktemp("synth")
    src = write_trace(tmp / "s.json", 60_000)
    pf = tmp / "s.pftrace"
    convert(src, pf)
    merged = tmp / "merged.pftrace"
    assert main(["merge", str(src), str(src), "--label", "a", "--label", "b", "-o", str(merged), "-q"]) == 0
    return pf, merged


def test_synthetic_trace_and_its_merge(synth):
    for t in synth:
        counts = _compare(t, {"replays": True, "lane_idle": True})
        assert counts["replays"] > 100 and counts["collectives"] > 100 and counts["lane_idle"] >= 1


def test_overlapping_lanes_and_collectives(tmp_path: Path):
    """Kernels overlapping on a lane (a union, not a sum), eager collectives of every type."""
    src = tmp_path / "overlap.json"
    _, layout = sql_synth.overlap_trace(src)
    pf = tmp_path / "overlap.pftrace"
    convert(src, pf, layout=layout)
    counts = _compare(pf, {"replays": True, "lane_idle": True})
    assert min(counts.values()) > 1


def test_gaps_and_zero_length_work(tmp_path: Path):
    src = tmp_path / "gaps.json"
    _, layout = sql_synth.gaps_trace(src)
    pf = tmp_path / "gaps.pftrace"
    convert(src, pf, layout=layout)
    assert _compare(pf, {"replays": True, "lane_idle": True})["lane_idle"] > 1


def _k(ts: int, dur: int, stream: int, corr: int, device: Any = 0, ph: str = "X", name: str = "") -> Dict[str, Any]:
    args: Dict[str, Any] = {"stream": stream, "correlation": corr}
    if device is not None:
        args["device"] = device
    ev = {"ph": ph, "cat": "kernel", "name": name or f"k{corr}_{ts}", "pid": 10 + (device or 0), "tid": stream,
          "ts": ts, "args": args}
    if ph == "X":
        ev["dur"] = dur
    return ev


def _write(path: Path, kernels: List[Dict[str, Any]], graph: List[int], eager: List[int]) -> Path:
    meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": p, "tid": p, "args": {"name": n}}
            for p, n in ((1, "cpu"), (10, "gpu0"), (11, "gpu1"))]
    launches = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch" if c in graph else "cudaLaunchKernel",
                 "pid": 1, "tid": 1, "ts": 10 + 3 * i, "dur": 2, "args": {"correlation": c}}
                for i, c in enumerate(graph + eager)]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": meta + launches + kernels}))
    return path


#: case -> (kernels, graph launches' correlations, eager launches' correlations, {shortcut: exact}).
CASES = {
    # replays queued behind each other and behind eager work, touching and overlapping work,
    # a zero-length kernel, an eager collective, eager work starting with a replay
    "queued": ([_k(100, 30, 7, 5), _k(120, 40, 9, 5), _k(180, 0, 7, 5), _k(200, 10, 9, 5), _k(210, 5, 7, 5),
                _k(150, 20, 11, 6), _k(400, 10, 11, 6), _k(405, 20, 13, 6), _k(90, 200, 15, 9),
                _k(500, 7, 15, 10, name="ncclDevKernel_AllReduce"), _k(430, 50, 7, 11), _k(430, 20, 17, 12)],
               [5, 6, 11], [9, 10, 12], {"replays": True, "lane_idle": True}),
    # two replays starting at the same time on the device: the index and the order by launch
    "same_start": ([_k(100, 30, 7, 5), _k(100, 30, 9, 6), _k(140, 10, 7, 6)], [5, 6], [],
                   {"replays": True, "lane_idle": True}),
    # an unfinished kernel (duration -1): idle gaps from the full table
    "negative_duration": ([_k(100, 30, 7, 5), _k(150, 20, 9, 5), _k(300, 0, 7, 5, ph="B"), _k(120, 5, 9, 6)],
                          [5, 6], [], {"replays": True, "lane_idle": False}),
    # replay 5's work on two devices: replays from the full table
    "replay_on_two_devices": ([_k(100, 30, 7, 5), _k(140, 20, 9, 5), _k(150, 40, 7, 5, device=1),
                               _k(300, 10, 7, 6)], [5, 6], [], {"replays": False, "lane_idle": True}),
    # a kernel without a device: neither shortcut
    "no_device": ([_k(100, 30, 7, 5), _k(140, 20, 9, 5, device=None), _k(300, 10, 7, 6)], [5, 6], [],
                  {"replays": False, "lane_idle": False}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_edge_cases(tmp_path: Path, case: str):
    kernels, graph, eager, exact = CASES[case]
    counts = _compare(_write(tmp_path / f"{case}.json", kernels, graph, eager), exact)
    assert counts["replays"] >= 2 and counts["lane_idle"] >= 2


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_collective_known_by_its_metadata_only(tmp_path: Path, suffix: str):
    """A collective kernel not named ``nccl*`` is known by its ``Collective name`` (``args.*`` in
    the JSON, ``debug.*`` once converted): counted in the collectives and as communication in the
    overlap, whichever keys the trace has (``_graph_ann_collective_arg_keys``)."""
    coll = _k(100, 40, 7, 5, name="custom_allreduce_kernel")
    coll["args"].update({"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,
                         "Group size": 2, "dtype": "Float"})
    kernels = [coll, _k(120, 50, 9, 6), _k(300, 10, 7, 7, name="ncclDevKernel_Broadcast")]
    src = _write(tmp_path / "coll.json", kernels, [], [5, 6, 7])
    trace = src
    if suffix == ".pftrace":
        trace = tmp_path / "coll.pftrace"
        convert(src, trace)
    assert _compare(trace, {"replays": True, "lane_idle": True})["collectives"] == 2
    with open_trace(trace, engine="portable") as s:
        rows = s.query("INCLUDE PERFETTO MODULE graph_ann.overlap; "
                       "SELECT comm_dur, compute_dur, overlapped_comm_dur FROM graph_ann_overlap").tuples()
    assert [tuple(int(v) for v in r) for r in rows] == [(50_000, 50_000, 20_000)]


def test_default_report_leaves_out_the_full_tables_modules():
    """The default summary's modules (and what they include) are not those of the full replay,
    idle and collective tables: including them would cost what the shortcuts save. (``--by
    module`` needs the replays' busy time: ``graph_ann.modules`` includes ``graph_ann.replays``.)"""
    from perfetto_graph_ann.cli.report import _summary_keys, _summary_modules
    from perfetto_graph_ann.query.includes import in_dependency_order

    used = set(in_dependency_order(_summary_modules(_summary_keys(False, False))))
    assert {"graph_ann.report_summary", "graph_ann.collective_rows", "graph_ann.overlap", "graph_ann.lanes",
            "graph_ann.scope_stats"} <= used
    assert not used & {"graph_ann.replays", "graph_ann.replay_lane_busy", "graph_ann.lane_idle",
                       "graph_ann.collectives", "graph_ann.scopes"}, used
