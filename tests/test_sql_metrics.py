"""The graph_ann SQL package on real and synthetic traces, against independent expectations.

Each case is a torch.profiler JSON trace (the bundled H200 recordings, or a synthetic one
written by ``sql_synth``) plus the LaneLayout it is converted with (the join's, or a
hand-built one). The case is converted to .pftrace once, loaded once per engine (the
portable WebAssembly engine always; a native shell when one is installed), and every
table is compared with ``sql_expect``, which computes the same numbers in plain Python from
the JSON and the layout: counts exact, times exact to the ns, ratios within 1e-9 relative.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Dict

import pytest
from support.sql_expect import check_row, isnull

from support import sql_expect as X
from support import sql_synth
from conftest import fixture_capture, fixture_trace
from support.engine_support import native_reason, portable_reason, requires_portable
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.join import join
from perfetto_graph_ann.join.model import LaneLayout, Placement
from perfetto_graph_ann.query import metrics
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.pipeline.convert import convert

REL = 1e-9


ENGINES = [
    pytest.param("portable", marks=requires_portable),
    pytest.param("native", marks=[pytest.mark.native,
                                  pytest.mark.skipif(native_reason() is not None, reason=str(native_reason()))]),
]


# ---- cases ------------------------------------------------------------------------------------
def _joined(name: str, graph_lanes: str = "all"):
    def build(tmp):
        src = fixture_trace(name)
        layout = join(read_trace(src), read_capture_record(fixture_capture(name)), graph_lanes=graph_lanes)
        return src, X.load_events(src), layout
    return build


def _plain(name: str):
    def build(tmp):
        src = fixture_trace(name)
        return src, X.load_events(src), None
    return build


def _allreduce_graph_restored(tmp):
    """allreduce_graph_rank0 with its NCCL kernels given the eager trace's collective args
    and moved to lane 60, as the join restores them (layout built here by hand)."""
    src = fixture_trace("allreduce_graph_rank0")
    events = X.load_events(src)
    eager = X.load_events(fixture_trace("allreduce_eager_rank0"))
    meta = next(e["args"] for e in eager if e.get("cat") == "kernel" and "Collective name" in e.get("args", {}))
    fields = {k: meta[k] for k in ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                                   "Process Group Name", "Process Group Description", "Process Group Ranks")}
    placements = {i: Placement(60, dict(fields, original_stream=e["args"]["stream"]))
                  for i, e in enumerate(events) if e.get("cat") == "kernel" and e["name"].startswith("nccl")}
    layout = LaneLayout(placements=placements, lane_names={(0, 60): "60 default_pg (allreduce)"})
    return src, events, layout


def _synth(fn):
    def build(tmp):
        src = tmp / f"{fn.__name__}.json"
        events, layout = fn(src)
        return src, events, layout
    return build


def _chrome_json_joined(name: str):
    """The joined trace exported as annotated Chrome JSON (write_chrome_json) and loaded as is:
    the SQL reads `args.*` and thread names there instead of `debug.*` and track names."""
    def build(tmp):
        from perfetto_graph_ann.write.chrome_json import write_chrome_json

        src = fixture_trace(name)
        trace = read_trace(src)
        layout = join(trace, read_capture_record(fixture_capture(name)), graph_lanes="all")
        out = tmp / f"{name}.annotated.json"
        write_chrome_json(trace, out, layout)
        return out, X.load_events(src), _as_torch_json(layout)
    return build


def _as_torch_json(layout):
    """What the annotated Chrome JSON says of ``layout`` (torch 2.15's rules): new lanes are
    named ``stream N`` (no process group description in these fixtures) and
    ``original_stream`` is only on events that moved."""
    import dataclasses

    placements = {i: dataclasses.replace(p, args={k: v for k, v in p.args.items()
                                                  if not (k == "original_stream" and v == p.lane)})
                  for i, p in layout.placements.items()}
    return dataclasses.replace(layout, placements=placements,
                               lane_names={k: f"stream {k[1]}" for k in layout.lane_names})


#: Cases whose file is loaded as is instead of converted to .pftrace first (``json_*`` of
#: ``_plain``: torch.profiler's own JSON through Perfetto's JSON importer).
LOAD_AS_IS = {"json_allreduce_eager_rank0", "json_seed_block_graph", "json_seed_block_annotated_joined"}

CASES = {
    "seed_block_annotated": _joined("seed_block_annotated"),
    "seed_block_annotated_none": _joined("seed_block_annotated", "none"),
    "seed_block_graph": _plain("seed_block_graph"),
    "two_branch": _joined("two_branch"),
    "allreduce_eager_rank0": _plain("allreduce_eager_rank0"),
    "allreduce_graph_rank0": _plain("allreduce_graph_rank0"),
    "allreduce_graph_restored": _allreduce_graph_restored,
    "synth_overlap": _synth(sql_synth.overlap_trace),
    "synth_gaps": _synth(sql_synth.gaps_trace),
    "json_allreduce_eager_rank0": _plain("allreduce_eager_rank0"),
    "json_seed_block_graph": _plain("seed_block_graph"),
    "json_seed_block_annotated_joined": _chrome_json_joined("seed_block_annotated"),
}


class _Loaded:
    def __init__(self, events, layout, session):
        self.events, self.layout, self.session = events, layout, session


@pytest.fixture(scope="session")
def _cache(tmp_path_factory):
    cache: Dict[Any, Any] = {}
    yield cache
    for v in cache.values():
        if isinstance(v, _Loaded):
            v.session.close()


def _load(cache, tmp_path_factory, case: str, engine: str) -> _Loaded:
    if (case, engine) not in cache:
        if case not in cache:
            tmp = tmp_path_factory.mktemp(f"sql-{case}")
            src, events, layout = CASES[case](tmp)
            out = tmp / f"{case}.pftrace"
            if case in LOAD_AS_IS:
                out = src
            else:
                convert(src, out, layout=layout)
            cache[case] = (out, events, layout)
        out, events, layout = cache[case]
        cache[(case, engine)] = _Loaded(events, layout, open_trace(out, engine=engine))
    return cache[(case, engine)]


@pytest.fixture(params=ENGINES)
def engine(request):
    return request.param


@pytest.fixture(params=list(CASES))
def loaded(request, engine, _cache, tmp_path_factory) -> _Loaded:
    return _load(_cache, tmp_path_factory, request.param, engine)


# ---- comparison helpers -----------------------------------------------------------------------
_isnull, _check = isnull, check_row  # shared with the other SQL tests (sql_expect)


def _rows(df, *key):
    out = {}
    for r in df.to_dict("records"):
        k = tuple(int(r[c]) if not isinstance(r[c], str) else r[c] for c in key)
        assert k not in out, f"duplicate key {k}"
        out[k if len(k) > 1 else k[0]] = r
    return out


# ---- tests ------------------------------------------------------------------------------------
def test_gpu_work(loaded):
    df = metrics.gpu_work(loaded.session)
    ws = X.works(loaded.events, loaded.layout)
    assert len(df) == len(ws)
    lc = X.launches(loaded.events)
    got = sorted(df.to_dict("records"), key=lambda r: (int(r["ts"]), int(r["dur"]), r["name"], int(r["lane_id"])))
    want = sorted(ws, key=lambda w: (w.ts, w.dur, w.name, w.lane))
    for g, w in zip(got, want):
        la = lc.get(w.correlation)
        exp = dict(ts=w.ts, dur=w.dur, end_ts=w.end, name=w.name, kind=w.kind, device=w.device, lane_id=w.lane,
                   lane_name=w.lane_name, stream=w.args.get("original_stream", w.stream),
                   original_stream=w.args.get("original_stream"), annotated_stream=w.args.get("annotated_stream"),
                   annotation=w.args.get("name"), correlation=w.correlation,
                   is_graphed=la is not None and la.name in X.GRAPH_LAUNCHES, graph_id=w.args.get("graph id"),
                   graph_node_id=w.args.get("graph node id"), replay=w.args.get("replay"),
                   join_strategy=w.args.get("join"))
        _check(g, exp, f"work {w.index}")
        if la is not None:
            launch = loaded.session.query(f"SELECT name, ts, dur FROM slice WHERE id = {int(g['launch_id'])}").tuples()
            assert launch == [(la.name, la.ts, la.dur)]
        else:
            assert _isnull(g["launch_id"])


def test_lanes(loaded):
    df = metrics.lane_summary(loaded.session)
    exp = X.lane_table(loaded.events, loaded.layout)
    got = _rows(df, "device", "lane_id")
    assert set(got) == set(exp)
    for key, e in exp.items():
        _check(got[key], e, f"lane {key}")


def test_top_kernels(loaded):
    df = metrics.lane_top_kernels(loaded.session)
    exp = X.top_kernels(loaded.events, loaded.layout)
    got = _rows(df, "device", "lane_id", "name")
    assert set(got) == set(exp)
    for key, e in exp.items():
        _check(got[key], e, f"kernel {key}")
    top2 = metrics.lane_top_kernels(loaded.session, top=2)
    assert len(top2) == sum(1 for e in exp.values() if e["rank"] <= 2)


def test_replays(loaded):
    df = metrics.replays(loaded.session)
    exp = X.replay_table(loaded.events, loaded.layout)
    got = _rows(df, "correlation")
    assert set(got) == set(exp)
    for corr, e in exp.items():
        _check(got[corr], {k: v for k, v in e.items() if k != "lanes"}, f"replay {corr}")
    lanes = _rows(metrics.replay_lanes(loaded.session), "correlation", "lane_id")
    assert set(lanes) == {(c, lane) for c, e in exp.items() for lane in e["lanes"]}
    for corr, e in exp.items():
        for lane, le in e["lanes"].items():
            _check(lanes[(corr, lane)], le, f"replay {corr} lane {lane}")


def test_collectives(loaded):
    df = metrics.collectives(loaded.session)
    exp = X.collective_table(loaded.events, loaded.layout)
    assert len(df) == len(exp)
    got = _rows(df, "ts", "lane_id")
    for e in exp.values():
        _check(got[(e["ts"], e["lane_id"])], e, f"collective at {e['ts']}")


def test_overlap(loaded):
    df = metrics.overlap(loaded.session)
    exp = X.overlap_table(loaded.events, loaded.layout)
    got = _rows(df, "device")
    assert set(got) == set(exp)
    for d, e in exp.items():
        _check(got[d], e, f"device {d}")


def test_lane_gaps_and_idle(loaded):
    gaps = X.lane_gaps(loaded.events, loaded.layout)
    df = metrics.lane_gaps(loaded.session)
    got = sorted((int(r["device"]), int(r["lane_id"]), int(r["ts"]), int(r["ts"]) + int(r["dur"]))
                 for r in df.to_dict("records"))
    assert got == sorted((d, lane, s, e) for (d, lane), g in gaps.items() for s, e in g)
    lanes = X.lane_table(loaded.events, loaded.layout)
    idle = _rows(metrics.lane_idle(loaded.session), "device", "lane_id")
    assert set(idle) == set(lanes)
    for key, g in gaps.items():
        lane = lanes[key]
        span = lane["end_ts"] - lane["first_ts"]
        _check(idle[key], dict(span_dur=span, busy_dur=lane["busy_dur"], idle_dur=span - lane["busy_dur"],
                               gap_count=len(g), max_gap_dur=max((e - s for s, e in g), default=0),
                               mean_gap_dur=(sum(e - s for s, e in g) / len(g)) if g else None), f"lane {key}")
        assert sum(e - s for s, e in g) == span - lane["busy_dur"]


# ---- properties the cases are meant to exercise (so the tests above cannot pass vacuously) -----
@pytest.mark.parametrize("engine", ENGINES)
def test_seed_block_lane_counts(engine, _cache, tmp_path_factory):
    s = _load(_cache, tmp_path_factory, "seed_block_annotated", engine).session
    df = metrics.lane_summary(s)
    assert dict(zip(df["lane_id"].astype(int), df["work_count"].astype(int))) == {7: 10, 61: 20, 62: 40}
    names = dict(zip(df["lane_id"].astype(int), df["lane_name"]))
    assert names[61] == "61 mlp" and names[62] == "62 attention"
    assert len(metrics.replays(s)) == 5


@pytest.mark.parametrize("engine", ENGINES)
def test_synthetic_cases_exercise_overlap_and_gaps(engine, _cache, tmp_path_factory):
    ov = _load(_cache, tmp_path_factory, "synth_overlap", engine)
    lanes = metrics.lane_summary(ov.session).set_index("lane_id")
    assert lanes.loc[61, "busy_dur"] < lanes.loc[61, "total_dur"]  # kernels overlap on lane 61
    o = metrics.overlap(ov.session).iloc[0]
    assert 0 < o["overlapped_comm_dur"] < o["comm_dur"]
    coll = metrics.collectives(ov.session)
    assert set(coll["collective_type"]) >= {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast",
                                            "reduce", "sendrecv"}
    gp = _load(_cache, tmp_path_factory, "synth_gaps", engine)
    idle = metrics.lane_idle(gp.session).set_index("lane_id")
    assert idle.loc[7, "gap_count"] >= 20 and idle.loc[13, "gap_count"] >= 4
    assert Counter(metrics.gpu_work(gp.session)["kind"]) == {"kernel": 27, "memcpy": 5, "memset": 4}


@pytest.mark.parametrize("engine", ENGINES)
def test_eager_allreduce_bandwidth(engine, _cache, tmp_path_factory):
    """The eager NCCL all-reduce: 1M floats over 2 ranks -> busbw = algbw x 2(n-1)/n = algbw."""
    s = _load(_cache, tmp_path_factory, "allreduce_eager_rank0", engine).session
    df = metrics.collectives(s)
    assert len(df) == 3
    assert set(df["msg_bytes"].astype(int)) == {4 * 1048576}
    for r in df.to_dict("records"):
        assert math.isclose(r["algbw_gbps"], 4 * 1048576 / int(r["dur"]), rel_tol=REL)
        assert math.isclose(r["busbw_gbps"], r["algbw_gbps"], rel_tol=REL)


@pytest.mark.parametrize("engine", ENGINES)
def test_graphed_allreduce_without_metadata(engine, _cache, tmp_path_factory):
    s = _load(_cache, tmp_path_factory, "allreduce_graph_rank0", engine).session
    df = metrics.collectives(s)
    assert len(df) == 5 and not df["has_metadata"].astype(bool).any()
    assert set(df["collective_type"]) == {"allreduce"} and df["msg_bytes"].isna().all()
    r = _load(_cache, tmp_path_factory, "allreduce_graph_restored", engine).session
    df = metrics.collectives(r)
    assert len(df) == 5 and df["has_metadata"].astype(bool).all() and df["is_graphed"].astype(bool).all()


def test_metrics_accept_a_path(tmp_path_factory, _cache):
    """A path opens (and closes) its own session; the numbers equal the session's."""
    engine = "portable"
    if portable_reason():
        pytest.skip(portable_reason())
    loaded = _load(_cache, tmp_path_factory, "two_branch", engine)
    out = _cache["two_branch"][0]
    a = metrics.lane_summary(out, engine=engine)
    b = metrics.lane_summary(loaded.session)
    assert a.equals(b)
