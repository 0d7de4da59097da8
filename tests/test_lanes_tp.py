"""Issue 5 acceptance, checked on the OUTPUT: each annotated .pftrace is loaded in the trace
processor (open_trace, portable engine) and compared with expectations computed from the
fixture JSON and capture records (tests/support/join_expect.py), not from the code under test."""
from __future__ import annotations

from collections import Counter
from decimal import Decimal


from support.engine_support import requires_portable
from support.join_expect import (COLLECTIVE_FIELDS, allreduce_annotations, calibrated_expectation, fixture_capture, fixture_trace,
                         kernels, load_json, strip_calibration)
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.join import join
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.pipeline.convert import convert

pytestmark = requires_portable  # the same logic is checked without an engine in test_join_fixtures.py

KERNELS_SQL = """
SELECT s.ts, s.name, t.name AS track,
       EXTRACT_ARG(s.arg_set_id, 'debug.stream') AS lane,
       EXTRACT_ARG(s.arg_set_id, 'debug.original_stream') AS original_stream,
       EXTRACT_ARG(s.arg_set_id, 'debug.annotated_stream') AS annotated_stream,
       EXTRACT_ARG(s.arg_set_id, 'debug.name') AS ann_name,
       EXTRACT_ARG(s.arg_set_id, 'debug.graph node id') AS node,
       EXTRACT_ARG(s.arg_set_id, 'debug.replay') AS replay,
       EXTRACT_ARG(s.arg_set_id, 'debug.join') AS strategy,
       EXTRACT_ARG(s.arg_set_id, 'debug.join_ambiguous') AS ambiguous
FROM slice s JOIN track t ON s.track_id = t.id
WHERE s.category = 'kernel'
"""


def _ts_ns(e) -> int:
    return int(Decimal(str(e["ts"])) * 1000)


def _convert(tmp_path, name, annotations, graph_lanes="all"):
    trace = read_trace(fixture_trace(name))
    layout = join(trace, annotations, graph_lanes) if annotations is not None else None
    out = tmp_path / f"{name}.{graph_lanes}.pftrace"
    convert(trace, out, layout=layout)
    return out


def _kernels(path):
    with open_trace(path, engine="portable") as s:
        res = s.query(KERNELS_SQL)
        return [dict(zip(res.columns, row)) for row in res.tuples()]


def _by_ts(rows):
    out = {}
    for r in rows:
        assert (r["ts"], r["name"]) not in out
        out[(r["ts"], r["name"])] = r
    return out


def test_seed_block_lanes_in_trace_processor(tmp_path):
    name = "seed_block_annotated"
    rows = _kernels(_convert(tmp_path, name, read_capture_record(fixture_capture(name))))
    assert Counter(r["lane"] for r in rows) == {7: 10, 61: 20, 62: 40}
    assert Counter(r["track"] for r in rows) == {"stream 7": 10, "61 mlp": 20, "62 attention": 40}
    got = _by_ts(rows)
    events = load_json(name)["traceEvents"]
    expect = calibrated_expectation(name)
    assert len(got) == len(expect) == 70
    for idx, x in expect.items():
        r = got[(_ts_ns(events[idx]), events[idx]["name"])]
        assert (r["lane"], r["ann_name"], r["node"], r["replay"]) == (x["lane"], x["scope"], x["key"], x["replay"])
        assert r["original_stream"] == x["stream"] and r["strategy"] == "calibrated" and r["ambiguous"] is None


def test_two_branch_calibrated_and_structural_in_trace_processor(tmp_path):
    name = "two_branch"
    ann = read_capture_record(fixture_capture(name))
    events = load_json(name)["traceEvents"]
    expect = calibrated_expectation(name)
    gemm = {i for i, e in kernels(load_json(name)) if "gemm" in e["name"]}

    cal = _by_ts(_kernels(_convert(tmp_path, name, ann)))
    structural_dir = tmp_path / "structural"
    structural_dir.mkdir()
    st = _by_ts(_kernels(_convert(structural_dir, name, strip_calibration(ann))))
    for idx, x in expect.items():
        key = (_ts_ns(events[idx]), events[idx]["name"])
        assert cal[key]["lane"] == x["lane"] and cal[key]["ann_name"] == x["scope"]
        assert cal[key]["ambiguous"] is None
        assert st[key]["strategy"] == "structural"
        assert st[key]["ambiguous"] == (1 if idx in gemm else None)
    assert {cal[(_ts_ns(events[i]), events[i]["name"])]["track"] for i in gemm} == {"60 left_projection", "61 right_projection"}


def test_graph_lanes_none_in_trace_processor(tmp_path):
    name = "two_branch"
    rows = _by_ts(_kernels(_convert(tmp_path, name, read_capture_record(fixture_capture(name)), "none")))
    events = load_json(name)["traceEvents"]
    for idx, x in calibrated_expectation(name).items():
        r = rows[(_ts_ns(events[idx]), events[idx]["name"])]
        assert r["lane"] == x["stream"] and r["annotated_stream"] == x["lane"] and r["original_stream"] is None
        assert r["track"] == f"stream {x['stream']}"


ARGS_SQL = """
SELECT s.ts, a.key, a.value_type, a.int_value, a.string_value, a.real_value
FROM slice s JOIN args a USING (arg_set_id)
WHERE s.category = 'kernel' AND s.name GLOB 'ncclDevKernel*' AND a.key GLOB 'debug.*'
"""


def _collective_args(path):
    with open_trace(path, engine="portable") as s:
        per = {}
        for ts, key, vtype, i, st, real in s.query(ARGS_SQL).tuples():
            per.setdefault(ts, {})[key] = (vtype, i, st, real)
    return per


def test_allreduce_graph_carries_eager_collective_fields(tmp_path):
    eager = _collective_args(_convert(tmp_path, "allreduce_eager_rank0", None))
    graphed_path = _convert(tmp_path, "allreduce_graph_rank0", allreduce_annotations())
    graphed = _collective_args(graphed_path)
    n_eager = sum(1 for _, e in kernels(load_json("allreduce_eager_rank0")) if e["name"].startswith("nccl"))
    n_graph = sum(1 for _, e in kernels(load_json("allreduce_graph_rank0")) if e["name"].startswith("nccl"))
    assert len(eager) == n_eager == 3 and len(graphed) == n_graph == 5
    keys = {f"debug.{k}" for k in COLLECTIVE_FIELDS}
    ref = {k: v for k, v in next(iter(eager.values())).items() if k in keys}
    assert set(ref) == keys  # the eager kernel really has every field
    for args in list(eager.values()) + list(graphed.values()):
        assert {k: v for k, v in args.items() if k in keys} == ref  # same names, types and values
    for args in graphed.values():
        assert args["debug.stream"][1] == 60 and args["debug.join"][2] == "structural"
    with open_trace(graphed_path, engine="portable") as s:
        names = {r[0] for r in s.query("SELECT DISTINCT t.name FROM slice s JOIN track t ON s.track_id = t.id "
                                       "WHERE s.name GLOB 'ncclDevKernel*'").tuples()}
    assert names == {"60 default_pg (all_reduce)"}
