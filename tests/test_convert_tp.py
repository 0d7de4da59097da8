"""The converter's output as the trace processor sees it (portable engine, Perfetto v52).

Expectations come from the fixture JSON (json + Decimal) and, for times, from Perfetto's own
JSON importer loading the same file: both must give identical slices to the ns.
"""
from __future__ import annotations

import collections
import json
from decimal import Decimal

import pytest

from conftest import TRACES, fixture_trace
from support.engine_support import requires_portable
from test_convert_fixtures import expected_flows, ns, source
from perfetto_graph_ann.join.model import LaneLayout, Placement
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert

pytestmark = requires_portable  # the output's packets are checked without an engine in test_convert_fixtures.py


def tp(path):
    return open_trace(path, engine="portable")


SLICES = "SELECT COALESCE(category, '') AS cat, name, ts, dur FROM slice WHERE dur >= 0"


@pytest.mark.parametrize("name", TRACES)
def test_fixture_in_trace_processor(name, tmp_path):
    doc = source(name)
    out = tmp_path / f"{name}.pftrace"
    convert(fixture_trace(name), out)
    with tp(out) as s:
        got = collections.Counter(s.query(SLICES).tuples())
        flows = s.query("SELECT COUNT(*) FROM flow").tuples()[0][0]
        kernel_tracks = s.query(
            "SELECT DISTINCT t.name AS lane, p.name AS root, EXTRACT_ARG(sl.arg_set_id, 'debug.stream') AS stream FROM slice sl "
            "JOIN track t ON sl.track_id = t.id JOIN track p ON t.parent_id = p.id WHERE sl.category = 'kernel'").tuples()
        snap = dict(s.query("SELECT clock_name, clock_value FROM clock_snapshot").tuples())
        types = dict(s.query(
            "SELECT key, value_type FROM args WHERE arg_set_id = (SELECT arg_set_id FROM slice "
            "WHERE category = 'kernel' ORDER BY ts LIMIT 1)").tuples())
    exp = collections.Counter((e.get("cat", ""), e["name"], ns(e["ts"]), ns(e["dur"]))
                              for e in doc["traceEvents"] if e.get("ph") == "X")
    exp.update((e.get("cat", ""), e["name"], ns(e["ts"]), 0) for e in doc["traceEvents"] if e.get("ph") == "i")
    assert got == exp
    assert flows == expected_flows(doc)
    for lane, root, stream in kernel_tracks:
        assert lane == f"stream {stream}" and root == "GPU 0"
    assert snap["REALTIME"] - snap["BOOTTIME"] == doc["baseTimeNanoseconds"]
    assert types["debug.correlation"] == "int" and types["debug.grid"] == "string"
    assert types["debug.blocks per SM"] == "real"


@pytest.mark.parametrize("name", ["seed_block_eager", "allreduce_eager_rank0", "seed_block_graph"])
def test_same_times_as_perfettos_json_importer(name, tmp_path):
    out = tmp_path / f"{name}.pftrace"
    convert(fixture_trace(name), out)
    q = SLICES + " AND category IN ('kernel', 'cpu_op', 'cuda_runtime', 'gpu_user_annotation')"
    with tp(fixture_trace(name)) as s:
        from_json = collections.Counter(s.query(q).tuples())
    with tp(out) as s:
        ours = collections.Counter(s.query(q).tuples())
    assert ours == from_json and sum(ours.values()) > 0


def test_overlapping_kernels_spill_and_keep_exact_times(tmp_path):
    from benchmarks.synth import write_trace

    src = write_trace(tmp_path / "overlap.json", 3000, overlap_ns=700)
    with open(src, "rb") as f:
        doc = json.loads(f.read(), parse_float=Decimal)
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    # the synthetic data really overlaps on one stream
    by_stream = collections.defaultdict(list)
    for e in kernels:
        by_stream[(e["pid"], e["tid"])].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    assert any(b[0] < a[1] for v in by_stream.values() for a, b in zip(sorted(v), sorted(v)[1:]))
    out = tmp_path / "overlap.pftrace"
    stats = convert(src, out)
    assert stats.spill_tracks > 0
    with tp(out) as s:
        got = collections.Counter(s.query(
            "SELECT name, ts, dur FROM slice WHERE category = 'kernel'").tuples())
        tracks = s.query("SELECT DISTINCT t.name AS lane, p.name AS root FROM slice sl JOIN track t ON sl.track_id = t.id "
                         "JOIN track p ON t.parent_id = p.id WHERE sl.category = 'kernel'").tuples()
    assert sum(got.values()) == len(kernels)
    assert got == collections.Counter((e["name"], ns(e["ts"]), ns(e["dur"])) for e in kernels)
    assert {t[0] for t in tracks} == {"stream 7"} and {t[1] for t in tracks} == {"GPU 0"}


def test_layout_moves_and_merges_lanes(tmp_path):
    """A hand-made LaneLayout on two_branch: the side stream's kernels join lane 7 (where they
    overlap the main stream's), the first main-stream kernel moves to a named lane 60."""
    trace = read_trace(fixture_trace("two_branch"))
    work = [e for e in trace.events if e.is_gpu_work]
    side = [e for e in work if e.stream != 7]
    main = [e for e in work if e.stream == 7]
    assert side and main
    placements = {e.index: Placement(7, {"name": "side", "original_stream": e.stream, "graph id": 9}) for e in side}
    placements[main[0].index] = Placement(60, {"name": "first", "original_stream": 7, "graph id": 9})
    layout = LaneLayout(placements=placements, lane_names={(0, 60): "60 first"})
    spans = sorted((e.ts_ns, e.end_ns) for e in work if placements.get(e.index, Placement(7, {})).lane == 7)
    overlapping = any(b[0] < a[1] for a, b in zip(spans, spans[1:]))
    out = tmp_path / "lanes.pftrace"
    stats = convert(trace, out, layout=layout)
    assert (stats.spill_tracks > 0) == overlapping
    with tp(out) as s:
        rows = s.query(
            "SELECT sl.ts, sl.dur, t.name AS lane, EXTRACT_ARG(sl.arg_set_id, 'debug.stream') AS s, "
            "EXTRACT_ARG(sl.arg_set_id, 'debug.original_stream') AS o, EXTRACT_ARG(sl.arg_set_id, 'debug.name') AS n, "
            "EXTRACT_ARG(sl.arg_set_id, 'debug.graph id') AS g, t.parent_id AS parent FROM slice sl "
            "JOIN track t ON sl.track_id = t.id WHERE sl.category = 'kernel'").tuples()
        ranks = dict(s.query("SELECT name, EXTRACT_ARG(source_arg_set_id, 'trace_id') AS u FROM track").tuples())
    assert len(rows) == len(work)
    assert len({r[7] for r in rows}) == 1  # one GPU root
    expect = {(e.ts_ns, e.dur_ns): e for e in work}
    assert len(expect) == len(work)
    for ts, dur, lane_name, stream, orig, nm, gid, _ in rows:
        e = expect[(ts, dur)]
        p = placements.get(e.index)
        if p is None:
            assert (lane_name, stream, orig, nm, gid) == ("stream 7", 7, None, None, None)
        elif p.lane == 60:
            assert (lane_name, stream, orig, nm, gid) == ("60 first", 60, 7, "first", 9)
        else:
            assert (lane_name, stream, orig, nm, gid) == ("stream 7", 7, e.stream, "side", 9)
    assert "60 first" in ranks


@pytest.mark.parametrize("name", ["seed_block_eager", "allreduce_eager_rank0"])
def test_same_args_as_perfettos_json_importer(name, tmp_path):
    """With typed list args, every arg row of every slice matches the JSON importer's (args.X ->
    debug.X), except our placeholders for empty array items, which the importer leaves as gaps.
    Perfetto turns '.' in a debug annotation name into '_' (``est. achieved occupancy %``), so
    keys are compared with '.' -> '_' on both sides. (The default encoding: test_convert_same_as_json_importer.py.)"""
    out = tmp_path / f"{name}.pftrace"
    convert(fixture_trace(name), out, ConvertConfig(list_args="typed"))
    q = ("SELECT s.name AS n, s.ts AS t, a.key AS k, a.value_type AS vt, a.int_value AS i, a.string_value AS sv, "
         "a.real_value AS r FROM slice s JOIN args a USING (arg_set_id) WHERE a.key GLOB '{}.*'")
    with tp(fixture_trace(name)) as s:
        from_json = {(n, t, k[len("args."):].replace(".", "_"), vt, i, sv, r) for n, t, k, vt, i, sv, r in s.query(q.format("args")).tuples()}
    with tp(out) as s:
        ours = {(n, t, k[len("debug."):].replace(".", "_"), vt, i, sv, r) for n, t, k, vt, i, sv, r in s.query(q.format("debug")).tuples()
                if not ("[" in k and sv in ("[]", "{}", "null"))}
    assert len(from_json) > 100
    assert ours == from_json


def test_hand_written_kinds_in_trace_processor(tmp_path):
    from test_convert_kinds import EVENTS
    from perfetto_graph_ann.read.kineto import parse_trace_bytes

    out = tmp_path / "k.pftrace"
    convert(parse_trace_bytes(json.dumps({"traceEvents": EVENTS}).encode()), out)
    with tp(out) as s:
        got = set(s.query("SELECT name, ts, dur, depth FROM slice").tuples())
        flows = s.query("SELECT COUNT(*) FROM flow").tuples()[0][0]
        py = s.query("SELECT t.name AS tn, p.name AS pn FROM slice sl JOIN track t ON sl.track_id = t.id "
                     "LEFT JOIN process_track pt ON pt.id = t.id LEFT JOIN process p USING (upid) "
                     "WHERE sl.name = 'train.py(10): step'").tuples()
    exp = {(e["name"], ns(e["ts"]), ns(e["dur"])) for e in EVENTS if e["ph"] == "X"}
    assert {g[:3] for g in got} == exp and len(got) == len(exp)
    depth = {g[0]: g[3] for g in got}
    assert depth["my_region"] == 0 and depth["k1"] == depth["k2"] == 1
    assert flows == 2
    assert py[0][0] == "main thread"  # 64-bit tid: a named track, never a truncated tid


def test_own_sequences_load_as_one_shared_sequence(tmp_path):
    """Busy tracks on sequences of their own (track_event_defaults, own clock and interning)
    give the trace processor exactly what one shared sequence gives: slices with their track,
    thread, depth and times, every arg row, flows, counters; and the JSON's kernel count."""
    from benchmarks.synth import make_trace, dumps
    from perfetto_graph_ann.read.kineto import parse_trace_bytes
    from perfetto_graph_ann.write.perfetto import WriterConfig, write_perfetto

    doc = make_trace(3000, overlap_ns=700)  # spill tracks too
    t0 = min(Decimal(e["ts"]) for e in doc["traceEvents"] if "ts" in e)
    doc["traceEvents"] += [{"ph": "C", "name": "mem", "pid": 1, "tid": 0, "ts": t0 + Decimal(k) / 8,
                            "args": {"bytes": k * 1000 + 7}} for k in range(300)]
    trace = parse_trace_bytes(dumps(doc))
    outs, seqs = {}, {}
    for label, minimum in (("own", WriterConfig.own_sequence_min), ("shared", 1 << 62)):
        outs[label] = tmp_path / f"{label}.pftrace"
        with open(outs[label], "wb") as f:
            seqs[label] = write_perfetto(trace, f, config=WriterConfig(own_sequence_min=minimum)).sequences
    assert seqs["shared"] == 1 and seqs["own"] >= 4
    queries = {
        "slices": "SELECT t.name AS tn, th.tid, COALESCE(sl.category, '') AS c, sl.name, sl.ts, sl.dur, sl.depth "
                  "FROM slice sl JOIN track t ON sl.track_id = t.id LEFT JOIN thread_track tt ON tt.id = t.id "
                  "LEFT JOIN thread th USING (utid)",
        "args": "SELECT s.name, s.ts, a.key, a.value_type, a.int_value, a.string_value, a.real_value "
                "FROM slice s JOIN args a USING (arg_set_id)",
        "flows": "SELECT a.name, a.ts, b.name AS bn, b.ts AS bts FROM flow f JOIN slice a ON f.slice_out = a.id "
                 "JOIN slice b ON f.slice_in = b.id",
        "counters": "SELECT t.name, c.ts, c.value FROM counter c JOIN track t ON c.track_id = t.id",
    }
    got = {}
    for label, path in outs.items():
        with tp(path) as s:
            got[label] = {k: collections.Counter(s.query(q).tuples()) for k, q in queries.items()}
    for k in queries:
        assert got["own"][k] == got["shared"][k], k
    # no made-up thread on GPU slices (descriptors are on a sequence of their own)
    assert not [r for r in got["own"]["args"] if r[2].startswith("legacy_event")]
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert sum(1 for r in got["own"]["slices"].elements() if r[2] == "kernel") == len(kernels)
    assert sorted(v for (_, _, v) in got["own"]["counters"].elements()) == [k * 1000 + 7 for k in range(300)]
    assert sum(got["own"]["flows"].values()) > 0
