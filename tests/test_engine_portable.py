"""Real SQL through the portable (WebAssembly) engine on the H200 fixtures and on a
TrackEvent trace built here; expectations are computed from the inputs, not hard-coded."""
from __future__ import annotations

from collections import Counter

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from support.engine_support import fixture_trace, load_json, requires_portable, x_counts_by_cat
from perfetto_graph_ann.query.session import open_trace

pytestmark = requires_portable


@pytest.fixture(scope="module")
def graph_session():
    with open_trace(fixture_trace("seed_block_graph"), engine="portable") as s:
        yield s


@pytest.fixture(scope="module")
def trackevent_trace(tmp_path_factory):
    """A small native TrackEvent trace: a 'GPU 0' root track with two named child tracks,
    kernels with typed debug annotations (the shape our writer produces)."""
    trace = pb.Trace()
    seq = 7

    def packet():
        p = trace.packet.add()
        p.trusted_packet_sequence_id = seq
        return p

    root = packet().track_descriptor
    root.uuid, root.name = 100, "GPU 0"
    for uuid, name in ((101, "stream 7"), (102, "60 default_pg (all_reduce)")):
        td = packet().track_descriptor
        td.uuid, td.parent_uuid, td.name = uuid, 100, name
    kernels = [
        (101, 1000, 500, "gemm", {"stream": 7, "correlation": 11}),
        (101, 2000, 300, "gelu", {"stream": 7, "correlation": 12}),
        (102, 1500, 900, "ncclAllReduce", {"stream": 60, "In msg nelems": 4096, "Collective name": "allreduce"}),
    ]
    for track, ts, dur, name, args in kernels:
        b = packet()
        b.timestamp = ts
        b.track_event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
        b.track_event.track_uuid = track
        b.track_event.name = name
        b.track_event.categories.append("kernel")
        for key, value in args.items():
            ann = b.track_event.debug_annotations.add()
            ann.name = key
            if isinstance(value, int):
                ann.int_value = value
            else:
                ann.string_value = value
        e = packet()
        e.timestamp = ts + dur
        e.track_event.type = pb.TrackEvent.TYPE_SLICE_END
        e.track_event.track_uuid = track
    path = tmp_path_factory.mktemp("te") / "small.pftrace"
    path.write_bytes(trace.SerializeToString())
    return path, kernels


def test_slice_counts_per_category_match_the_json(graph_session):
    expected = x_counts_by_cat("seed_block_graph")
    got = {r.category: r.n for r in graph_session.query("SELECT category, COUNT(*) AS n FROM slice GROUP BY category")}
    for cat in ("kernel", "cuda_runtime"):
        assert got.get(cat) == expected[cat], cat


def test_kernel_args_match_the_json(graph_session):
    events = [e for e in load_json("seed_block_graph")["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    expected = Counter((e["args"]["correlation"], e["args"]["stream"], tuple(e["args"]["grid"])) for e in events)
    df = graph_session.query(
        """
        SELECT EXTRACT_ARG(arg_set_id, 'args.correlation') AS corr,
               EXTRACT_ARG(arg_set_id, 'args.stream') AS stream,
               EXTRACT_ARG(arg_set_id, 'args.grid[0]') AS g0,
               EXTRACT_ARG(arg_set_id, 'args.grid[1]') AS g1,
               EXTRACT_ARG(arg_set_id, 'args.grid[2]') AS g2
        FROM slice WHERE category = 'kernel'
        """
    ).df()
    got = Counter((int(r.corr), int(r.stream), (int(r.g0), int(r.g1), int(r.g2))) for r in df.itertuples())
    assert got == expected


def test_thread_names_match_the_json(graph_session):
    expected = {e["args"]["name"] for e in load_json("seed_block_graph")["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
    got = {r.name for r in graph_session.query("SELECT DISTINCT name FROM thread WHERE name IS NOT NULL")}
    assert expected <= got


def test_rows_and_dataframe_agree(graph_session):
    res = graph_session.query("SELECT id, name, dur FROM slice ORDER BY id LIMIT 5")
    assert res.columns == ["id", "name", "dur"]
    assert len(res) == 5
    df = res.df()
    assert list(df["id"]) == [r.id for r in res]
    assert res.tuples()[0] == (df["id"][0], df["name"][0], df["dur"][0])


def test_graph_ann_module_is_included(graph_session):
    """INCLUDE PERFETTO MODULE graph_ann.<module> works: the package is registered."""
    n = graph_session.query("INCLUDE PERFETTO MODULE graph_ann.gpu_work; SELECT COUNT(*) AS n FROM graph_ann_gpu_work").rows[0].n
    assert n == x_counts_by_cat("seed_block_graph")["kernel"]


def test_trackevent_track_names_and_debug_args(trackevent_trace):
    path, kernels = trackevent_trace
    with open_trace(path, engine="portable") as s:
        tracks = {r.name: r.parent for r in s.query("SELECT t.name, p.name AS parent FROM track t LEFT JOIN track p ON t.parent_id = p.id")}
        assert tracks["stream 7"] == "GPU 0"
        assert tracks["60 default_pg (all_reduce)"] == "GPU 0"
        rows = s.query(
            """
            SELECT s.name, s.ts, s.dur, t.name AS track,
                   EXTRACT_ARG(s.arg_set_id, 'debug.stream') AS stream,
                   EXTRACT_ARG(s.arg_set_id, 'debug.In msg nelems') AS nelems,
                   EXTRACT_ARG(s.arg_set_id, 'debug.Collective name') AS coll
            FROM slice s JOIN track t ON s.track_id = t.id ORDER BY s.ts
            """
        ).rows
    names = {101: "stream 7", 102: "60 default_pg (all_reduce)"}
    expected = sorted(
        (ts, name, dur, names[track], args["stream"], args.get("In msg nelems"), args.get("Collective name"))
        for track, ts, dur, name, args in kernels
    )
    assert [(r.ts, r.name, r.dur, r.track, r.stream, r.nelems, r.coll) for r in rows] == expected


def test_a_package_of_our_own_registers_next_to_graph_ann(tmp_path):
    from perfetto_graph_ann._resources import sql_package_dir
    from perfetto_graph_ann.errors import QueryError
    from perfetto_graph_ann.query.engine import EngineConfig

    pkg = tmp_path / "mytest"
    (pkg / "deep").mkdir(parents=True)
    (pkg / "kernels.sql").write_text(
        "CREATE PERFETTO TABLE mytest_kernels AS SELECT id, dur FROM slice WHERE category = 'kernel';\n"
    )
    (pkg / "deep" / "total.sql").write_text(
        "INCLUDE PERFETTO MODULE mytest.kernels;\n"
        "CREATE PERFETTO FUNCTION mytest_total() RETURNS LONG AS SELECT SUM(dur) FROM mytest_kernels;\n"
    )
    (pkg / "broken.sql").write_text("CREATE PERFETTO TABLE oops AS SELEC 1;\n")
    events = [e for e in load_json("seed_block_graph")["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    config = EngineConfig(sql_packages=[sql_package_dir(), pkg])
    with open_trace(fixture_trace("seed_block_graph"), engine="portable", config=config) as s:
        row = s.query("INCLUDE PERFETTO MODULE mytest.deep.total; SELECT COUNT(*) AS n, mytest_total() AS total FROM mytest_kernels").rows[0]
        assert row.n == len(events)
        # Perfetto's JSON importer turns microseconds into ns as round(us * 1000).
        assert row.total == sum(round(e["dur"] * 1000) for e in events)
        s.query("INCLUDE PERFETTO MODULE graph_ann.gpu_work; SELECT 1")  # ours is still there
        with pytest.raises(QueryError, match="mytest.broken"):
            s.query("INCLUDE PERFETTO MODULE mytest.broken")


def test_node_starts_before_pandas_is_imported(tmp_path):
    """The perfetto.trace_processor package imports pandas (~0.4 s); the engine starts Node
    first so that the two overlap (docs/design.md, Engines, "Start-up order"). In a fresh
    interpreter: importing the session module imports neither, Node is spawned while pandas
    is still absent, and the session still answers (and builds a DataFrame) afterwards."""
    import os
    import subprocess
    import sys

    script = f"""
import subprocess, sys
import perfetto_graph_ann.query.session as session
assert "pandas" not in sys.modules and "perfetto.trace_processor" not in sys.modules, "imported at once"
seen = []
real = subprocess.Popen
class Spy(real):
    def __init__(self, *a, **k):
        if any("portable_host" in str(x) for x in a[0]):
            seen.append("pandas" in sys.modules)
        super().__init__(*a, **k)
subprocess.Popen = Spy
with session.open_trace({str(fixture_trace("seed_block_graph"))!r}, engine="portable") as s:
    n = int(s.query("SELECT COUNT(*) AS n FROM slice").df().n[0])
print(seen, n > 0, "pandas" in sys.modules)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[False]", "True", "True"]
