"""The critical path of a replay (issue 35, item 2): recorded edges, stream-order fallback,
sidecar round trip of the edges, the join's args, the dependency flows and the SQL module.

Expectations are computed here from the events and edges by other means than
``join.critical_path``: every source-to-sink chain of the graph enumerated by brute force
(the longer branch), and per-stream sweeps over the raw JSON of the fixture.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from support import sql_expect as X
from support.engine_support import requires_portable

from perfetto_graph_ann import load_annotations, save_annotations
from perfetto_graph_ann.annotations.model import AnnotationSet, GraphEdge, GraphRecord, NodeRecord
from perfetto_graph_ann.errors import SidecarError
from perfetto_graph_ann.join import critical_path as cp
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace

from conftest import FIXTURES

# ---- a synthetic two-branch graph -------------------------------------------------------
#
#   0 fork (kernel, s7) -> 1 empty -> 2 a1 (s7) -> 3 a2 (s7) ------------------> 6 join (s7)
#                                  \-> 4 b1 (s9) -> 5 b2 (s9) -> 7 b3 (s9) --/
# Branch b is longer (3 kernels of 10 us vs 2 of 12 us); both start once the fork ends.

EX = 3
DUR = {0: 5_000, 2: 12_000, 3: 12_000, 4: 10_000, 5: 10_000, 7: 10_000, 6: 4_000}
STREAM = {0: 7, 2: 7, 3: 7, 4: 9, 5: 9, 7: 9, 6: 7}
EDGES = [(0, 1), (1, 2), (2, 3), (1, 4), (4, 5), (5, 7), (3, 6), (7, 6)]
LAUNCH_TS = 1_000
FIRST_TS = 3_000
GAP = 1_000  # from the end of the releasing predecessor to a dependent's start


def _graph(edges=EDGES) -> GraphRecord:
    nodes = tuple(NodeRecord((EX << 32) | k, "empty" if k == 1 else "kernel", kernel=f"k{k}")
                  for k in range(8))
    return GraphRecord(EX, nodes, edges=None if edges is None else tuple(GraphEdge(a, b) for a, b in edges))


def _schedule() -> Dict[int, Tuple[int, int]]:
    """node -> (start, end): every kernel starts GAP after the last of its GPU-work
    predecessors ends (through the empty node), the fork at FIRST_TS."""
    preds: Dict[int, List[int]] = {}
    for a, b in EDGES:
        preds.setdefault(b, []).append(a)

    def work_preds(k):
        out = []
        for p in preds.get(k, []):
            out += [p] if p in DUR else work_preds(p)
        return out

    times: Dict[int, Tuple[int, int]] = {}
    for k in (0, 2, 3, 4, 5, 7, 6):  # a topological order
        ps = work_preds(k)
        start = FIRST_TS if not ps else max(times[p][1] for p in ps) + GAP
        times[k] = (start, start + DUR[k])
    return times


def _items(times) -> List[cp.Item]:
    return [cp.Item(100 + k, s, e, STREAM[k], k) for k, (s, e) in sorted(times.items())]


def _chains(edges) -> List[List[int]]:
    """Every source-to-sink chain of GPU-work nodes (brute force, empty nodes skipped)."""
    succ: Dict[int, List[int]] = {}
    targets = set()
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        targets.add(b)
    out = []

    def walk(k, acc):
        acc = acc + [k] if k in DUR else acc
        if not succ.get(k):
            out.append(acc)
        for s in succ.get(k, []):
            walk(s, acc)

    for src in {a for a, _ in edges} - targets:
        walk(src, [])
    return out


def test_two_branch_path_is_the_longer_branch():
    times = _schedule()
    chains = _chains(EDGES)
    longest = max(chains, key=lambda c: sum(DUR[k] for k in c))
    assert longest == [0, 4, 5, 7, 6]  # the test's own premise: branch b is the longer one
    wp, rank = cp.work_predecessors(_graph())
    assert wp[2] == (0,) and wp[4] == (0,)  # through the empty node
    path = cp.edges_path(_items(times), wp, rank, LAUNCH_TS)
    assert path.source == cp.SOURCE_EDGES
    assert [it.index - 100 for it in path.items] == longest
    end = max(e for _, e in times.values())
    assert path.end_ns == end and path.start_ns == LAUNCH_TS
    assert sum(it.share_ns + it.wait_ns for it in path.items) == end - LAUNCH_TS
    assert [it.share_ns for it in path.items] == [DUR[k] for k in longest]
    assert [it.wait_ns for it in path.items] == [FIRST_TS - LAUNCH_TS] + [GAP] * (len(longest) - 1)
    # slack: the shorter branch can grow by the difference of the branches before it bounds
    shorter = sum(DUR[k] + GAP for k in (2, 3))
    longer = sum(DUR[k] + GAP for k in (4, 5, 7))
    assert path.slack[102] == path.slack[103] == longer - shorter
    assert all(path.slack[it.index] == 0 for it in path.items)


def test_stream_order_fallback_without_edges():
    times = _schedule()
    path = cp.stream_order_path(_items(times), LAUNCH_TS)
    assert path.source == cp.SOURCE_STREAM
    # the join kernel (last end) is on stream 7: the path is stream 7's work, in start order
    expected = sorted((k for k in times if STREAM[k] == 7), key=lambda k: times[k][0])
    assert [it.index - 100 for it in path.items] == expected
    assert sum(it.share_ns + it.wait_ns for it in path.items) == path.end_ns - LAUNCH_TS
    end9 = max(times[k][1] for k in times if STREAM[k] == 9)
    assert path.slack[107] == path.end_ns - end9


def test_cycle_is_refused():
    with pytest.raises(cp.CycleError):
        cp.work_predecessors(_graph(EDGES + [(6, 0)]))


# ---- sidecar -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["s.pga", "s.json"])
def test_edges_round_trip_both_forms(tmp_path: Path, name: str):
    g = dataclasses.replace(_graph(), edges=tuple(GraphEdge(a, b) for a, b in EDGES) + (GraphEdge(3, 7, 1, 1),))
    none = dataclasses.replace(_graph(None), exec_id=4,
                               nodes=tuple(dataclasses.replace(n, key=(4 << 32) | n.local_id) for n in _graph().nodes))
    empty = dataclasses.replace(none, exec_id=6, edges=(),
                                nodes=tuple(dataclasses.replace(n, key=(6 << 32) | n.local_id) for n in none.nodes))
    save_annotations(tmp_path / name, AnnotationSet((g, none, empty)))
    back = load_annotations(tmp_path / name)
    assert [x.edges for x in back.graphs] == [g.edges, None, ()]


def _v3_doc(edges=None) -> dict:
    doc = {"format": "perfetto_graph_ann.sidecar", "version": 3, "backend": "cupti", "lanes": {},
           "graphs": [{"exec_id": 2, "nodes": [{"key": (2 << 32) | 0}, {"key": (2 << 32) | 1}]}]}
    if edges is not None:
        doc["graphs"][0]["edges"] = edges
    return doc


def test_old_sidecar_loads_without_edges(tmp_path: Path):
    p = tmp_path / "v3.json"
    p.write_text(json.dumps(_v3_doc()))
    assert load_annotations(p).graphs[0].edges is None


@pytest.mark.parametrize("version,edges,problem", [
    (3, [[0, 1]], "version-4 field"),
    (4, [[0, 5]], "does not list"),
    (4, [[1, 1]], "to itself"),
    (4, [[0]], "must be a list of"),
])
def test_bad_edges_name_the_file(tmp_path: Path, version, edges, problem):
    doc = _v3_doc(edges)
    doc["version"] = version
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(SidecarError) as ei:
        load_annotations(p)
    assert str(p) in str(ei.value) and problem in str(ei.value)


# ---- the two-branch fixture (H200) with its edges ------------------------------------------
#
# two_branch: left_projection (GEMM, stream 7) and right_projection (GEMM, stream 145) run
# concurrently; combine (add, stream 7) waits for both. Its capture record has no edges;
# the graph's true edges are node 0 -> 2 and 1 -> 2 (local ids), added here.

def _fixture(with_edges: bool):
    ann = load_annotations(FIXTURES / "two_branch.capture.json")
    if with_edges:
        g = dataclasses.replace(ann.graphs[0], edges=(GraphEdge(0, 2), GraphEdge(1, 2)))
        ann = dataclasses.replace(ann, graphs=(g,))
    return ann


def _raw_replays():
    """(launch correlation -> the replay's kernels, launch correlation -> launch start, launch
    correlation -> start of its path), from the raw JSON (exact ns, Decimal). The path starts
    at the launch, or where the GPU was still busy then with earlier work (replays that start
    before, work outside replays that starts before), at the end of that work."""
    events = X.load_events(FIXTURES / "two_branch.trace.json.gz")
    launches = {e["args"]["correlation"]: X.ns(e["ts"]) for e in events
                if e.get("ph") == "X" and e.get("name") in X.GRAPH_LAUNCHES}
    out: Dict[int, List] = {}
    eager = []
    for i, e in enumerate(events):
        if e.get("ph") == "X" and e.get("cat") in X.GPU_CATS:
            t = (X.ns(e["ts"]), X.ns(e["ts"]) + X.ns(e["dur"]), e["args"].get("stream"), e["name"], i)
            if e["args"].get("correlation") in launches:
                out.setdefault(e["args"]["correlation"], []).append(t)
            else:
                eager.append(t)
    out = {c: sorted(v) for c, v in out.items()}
    starts = {}
    for c, ks in out.items():
        first = ks[0][0]
        earlier = [max(k[1] for k in o) for o in out.values() if o[0][0] < first] + [k[1] for k in eager if k[0] < first]
        prev = max(earlier) if earlier else launches[c]
        starts[c] = launches[c] + max(0, min(prev, first) - launches[c])
    return out, launches, starts


def _expected_edges(kernels, launch_ts):
    """Path on the true edges: the GEMM that ends later, then the add (the only kernel that
    is not a GEMM); shares / waits by their definition."""
    gemms = [k for k in kernels if "gemm" in k[3]]
    add = [k for k in kernels if "gemm" not in k[3]]
    assert len(gemms) == 2 and len(add) == 1
    first = max(gemms, key=lambda k: (k[1], -k[0]))
    path = [first, add[0]]
    release = [launch_ts, first[1]]
    return [(k, k[1] - max(k[0], r), max(0, k[0] - r)) for k, r in zip(path, release)]


def test_join_marks_the_path_on_the_fixture():
    raw, launches, _ = _raw_replays()
    trace = read_trace(FIXTURES / "two_branch.trace.json.gz")
    layout = join(trace, _fixture(True), graph_lanes="all")
    assert layout.report.critical_paths == {cp.SOURCE_EDGES: len(raw)}
    for corr, kernels in raw.items():
        exp = _expected_edges(kernels, launches[corr])
        on = {k[4] for k, _, _ in exp}
        for k in kernels:
            args = layout.placements[k[4]].args
            if k[4] in on:
                assert args.get(cp.PATH_ARG) is True and cp.SLACK_ARG not in args
            else:  # the other GEMM: it could end this much later before the add starts later
                assert cp.PATH_ARG not in args
                assert args[cp.SLACK_ARG] == exp[0][0][1] - k[1]


def test_join_without_edges_adds_nothing():
    trace = read_trace(FIXTURES / "two_branch.trace.json.gz")
    layout = join(trace, _fixture(False), graph_lanes="all")
    assert set(layout.report.critical_paths) == {cp.REASON_NO_EDGES}
    assert not any(cp.PATH_ARG in p.args or cp.SLACK_ARG in p.args for p in layout.placements.values())
    assert layout.edge_flows == []


def _converted(tmp_path: Path, with_edges: bool, flows: bool = False) -> Path:
    from perfetto_graph_ann.pipeline.convert import convert

    trace = read_trace(FIXTURES / "two_branch.trace.json.gz")
    layout = join(trace, _fixture(with_edges), graph_lanes="all", edge_flows=flows)
    out = tmp_path / f"tb{int(with_edges)}{int(flows)}.pftrace"
    convert(trace, out, layout=layout)
    return out


def _sql_rows(path: Path, sql: str):
    from perfetto_graph_ann.query.session import open_trace

    with open_trace(path, engine="portable") as s:
        s.query("INCLUDE PERFETTO MODULE graph_ann.critical_path")
        return s.query(sql).tuples()


@requires_portable
def test_sql_path_on_recorded_edges(tmp_path: Path):
    raw, launches, starts = _raw_replays()
    path = _converted(tmp_path, True)
    rows = _sql_rows(path, "SELECT l.ts AS lts, i.position, i.ts, i.end_ts, i.share_dur, i.wait_dur, i.edges_source "
                           "FROM graph_ann_critical_path_item AS i JOIN slice AS l ON l.id = i.launch_id "
                           "ORDER BY l.ts, i.position")
    got: Dict[int, list] = {}
    for lts, pos, ts, end, share, wait, src in rows:
        assert src == "edges"
        got.setdefault(lts, []).append((ts, end, share, wait))
    exp = {launches[c]: [(k[0], k[1], share, wait) for k, share, wait in _expected_edges(kernels, starts[c])]
           for c, kernels in raw.items()}
    assert got == exp
    assert any(starts[c] > launches[c] for c in raw)  # the fixture's replays queue: the path starts later
    summary = _sql_rows(path, "SELECT ts, dur, edges_source, bounding_scope, off_path_slack_dur FROM graph_ann_critical_path")
    assert sorted(ts for ts, *_ in summary) == sorted(starts.values())
    for ts, dur, src, bounding, slack in summary:
        kernels = raw[next(c for c, t in starts.items() if t == ts)]
        e = _expected_edges(kernels, ts)
        assert src == "edges" and dur == e[-1][0][1] - ts
        gemms = sorted((k for k in kernels if "gemm" in k[3]), key=lambda k: k[1])
        assert slack == gemms[1][1] - gemms[0][1]  # the other projection's slack
        # the GEMM that gated the add covers ~95 us of the path, the add ~3 us: its scope bounds
        assert e[0][1] > e[1][1]
        assert bounding == {7: "left_projection", 145: "right_projection"}[e[0][0][2]]


@requires_portable
def test_sql_stream_order_without_edges(tmp_path: Path):
    """No edges: per replay, the stream whose work ends last; its work is the path."""
    raw, launches, starts = _raw_replays()
    path = _converted(tmp_path, False)
    rows = _sql_rows(path, "SELECT l.ts AS lts, i.ts, i.share_dur, i.wait_dur, i.edges_source, i.stream "
                           "FROM graph_ann_critical_path_item AS i JOIN slice AS l ON l.id = i.launch_id "
                           "ORDER BY l.ts, i.position")
    got: Dict[int, list] = {}
    for lts, ts, share, wait, src, stream in rows:
        assert src == "stream order"
        got.setdefault(lts, []).append((ts, share, wait, stream))
    exp = {}
    for c, kernels in raw.items():
        last = max(kernels, key=lambda k: (k[1], -k[0]))
        on = [k for k in kernels if k[2] == last[2]]  # hardware stream of the last end, start order
        release, lst = starts[c], []
        for k in on:
            lst.append((k[0], k[1] - max(k[0], release), max(0, k[0] - release), k[2]))
            release = k[1]
        exp[launches[c]] = lst
    assert got == exp
    lanes = _sql_rows(path, "SELECT DISTINCT edges_source FROM graph_ann_critical_path_lane")
    assert lanes == [("stream order",)]


@requires_portable
def test_dependency_flows(tmp_path: Path):
    raw, _, _ = _raw_replays()
    base = _sql_rows(_converted(tmp_path, True), "SELECT COUNT(*) FROM flow")[0][0]
    with_flows = _converted(tmp_path, True, flows=True)
    n = _sql_rows(with_flows, "SELECT COUNT(*) FROM flow")[0][0]
    assert n - base == 2 * len(raw)  # two edges (left -> add, right -> add) per replay
    kinds = _sql_rows(with_flows, "SELECT DISTINCT a.category, b.category FROM flow AS f "
                                  "JOIN slice AS a ON a.id = f.slice_out JOIN slice AS b ON b.id = f.slice_in "
                                  "WHERE a.category = 'kernel'")
    assert kinds == [("kernel", "kernel")]


# ---- capture: the edges are read at the end of the capture, in local ids ------------------

class _EdgeCuda:
    """A FakeCuda whose graphs have dependency edges (kept per graph by listing position, so a
    copy of a graph has the same edges between its own handles)."""

    @staticmethod
    def make(c_table: bool, can_clone: bool = True):
        from support.capture_fakes import FakeCuda

        class EdgeCuda(FakeCuda):
            def __init__(self):
                super().__init__()
                self.deps: Dict[int, List[Tuple[int, int]]] = {}  # graph -> (from pos, to pos)
                self.edge_reads: List[int] = []
                self.c_table, self.can_clone = c_table, can_clone

            def depend(self, graph: int, a: int, b: int) -> None:
                self.deps.setdefault(graph, []).append((a, b))

            def clone_graph(self, graph: int):
                c = super().clone_graph(graph)
                if c is not None:
                    self.deps[c] = list(self.deps.get(graph, []))
                return c

            def edges(self, graph: int):
                self.edge_reads.append(graph)
                nodes = self.graphs[graph]
                return [(nodes[a].handle, nodes[b].handle, 0, 0) for a, b in self.deps.get(graph, [])]

        return EdgeCuda()


@pytest.mark.usefixtures("capture_path")
@pytest.mark.parametrize("c_table", [False, True])
def test_capture_records_edges_in_local_ids(c_table: bool):
    from perfetto_graph_ann.capture import session as S
    from perfetto_graph_ann.capture.registry import Registry

    cuda = _EdgeCuda.make(c_table)
    stream = 0x50
    g = cuda.begin_capture(stream)
    sess = S.CaptureSession(cuda, stream, Registry(), markers_from=None)
    sess.start()
    for k in ("fork", "left", "right", "join"):
        cuda.launch(stream, k)
    for a, b in ((0, 1), (0, 2), (1, 3), (2, 3)):
        cuda.depend(g, a, b)
    sess.finish_capture()
    assert cuda.edge_reads and cuda.edge_reads[0] == g  # read before the capture ends
    cuda.forget(g)  # torch drops the template at instantiation
    sess.bind_exec(cuda.instantiate(cuda.end_capture(stream)))
    rec = sess.record
    assert rec.edges == tuple(GraphEdge(a, b) for a, b in ((0, 1), (0, 2), (1, 3), (2, 3)))
    wp, _ = cp.work_predecessors(rec)
    assert wp == {0: (), 1: (0,), 2: (0,), 3: (1, 2)}


@pytest.mark.usefixtures("capture_path")
def test_capture_without_an_edge_reader_records_none():
    from support.capture_fakes import FakeCuda

    from perfetto_graph_ann.capture import session as S
    from perfetto_graph_ann.capture.registry import Registry

    cuda = FakeCuda()
    g = cuda.begin_capture(0x50)
    sess = S.CaptureSession(cuda, 0x50, Registry(), markers_from=None)
    sess.start()
    cuda.launch(0x50, "k")
    sess.finish_capture()
    cuda.forget(g)
    sess.bind_exec(cuda.instantiate(cuda.end_capture(0x50)))
    assert sess.record.edges is None


@requires_portable
def test_report_by_critical_path(tmp_path: Path, capsys):
    from perfetto_graph_ann.cli.main import main

    raw, _, _ = _raw_replays()
    path = _converted(tmp_path, True)
    out = tmp_path / "report.json"
    assert main(["report", str(path), "--by", "critical-path", "--engine", "portable", "--format", "json",
                 "-o", str(out), "-q"]) == 0
    rows = json.loads(out.read_text())["critical_paths"]
    by_scope = {r["scope"]: r for r in rows}
    assert set(by_scope) == {"left_projection", "right_projection", "combine"}
    assert all(r["edges_source"] == "edges" and r["replay_count"] == len(raw) for r in rows)
    assert sum(r["bound_count"] for r in rows) == len(raw)
    assert by_scope["combine"]["min_slack_dur"] == 0 and by_scope["combine"]["bound_count"] == 0


@requires_portable
def test_cli_convert_edge_flows_from_a_v4_sidecar(tmp_path: Path):
    from perfetto_graph_ann.cli.main import main

    raw, _, _ = _raw_replays()
    side = tmp_path / "two_branch.v4.json"
    save_annotations(side, _fixture(True))
    assert json.loads(side.read_text())["version"] == 4
    outs = {}
    for flag in ([], ["--edge-flows"]):
        out = tmp_path / f"tb{len(flag)}.pftrace"
        assert main(["convert", str(FIXTURES / "two_branch.trace.json.gz"), "-a", str(side), "-o", str(out),
                     *flag, "-q"]) == 0
        outs[bool(flag)] = _sql_rows(out, "SELECT COUNT(*) FROM flow")[0][0]
    assert outs[True] - outs[False] == 2 * len(raw)


def test_cli_edge_flows_without_annotations_is_refused(tmp_path: Path, capsys):
    from perfetto_graph_ann.cli.main import main

    out = tmp_path / "x.pftrace"
    assert main(["convert", str(FIXTURES / "two_branch.trace.json.gz"), "-o", str(out), "--edge-flows"]) == 2
    assert not out.exists() and "--edge-flows" in capsys.readouterr().err


@pytest.mark.usefixtures("capture_path")
def test_capture_edges_naming_unknown_nodes_are_dropped_not_fatal():
    from perfetto_graph_ann.capture import session as S
    from perfetto_graph_ann.capture.registry import Registry

    cuda = _EdgeCuda.make(False)
    g = cuda.begin_capture(0x50)
    sess = S.CaptureSession(cuda, 0x50, Registry(), markers_from=None, verify=False)
    sess.start()
    cuda.launch(0x50, "a")
    cuda.launch(0x50, "b")
    cuda.depend(g, 0, 1)
    real = cuda.edges
    cuda.edges = lambda graph: real(graph) + [(0xdead, 0xbeef, 0, 0)]
    sess.finish_capture()
    cuda.forget(g)
    sess.bind_exec(cuda.instantiate(cuda.end_capture(0x50)))
    rec = sess.record
    assert rec.edges is None and [n.kernel for n in rec.nodes] == ["a", "b"]


@requires_portable
def test_sql_same_on_annotated_chrome_json(tmp_path: Path):
    """The join's args reach the annotated Chrome JSON too (``args.critical path``): the SQL on
    it gives the .pftrace's path."""
    from perfetto_graph_ann.write.chrome_json import write_chrome_json

    trace = read_trace(FIXTURES / "two_branch.trace.json.gz")
    layout = join(trace, _fixture(True), graph_lanes="all")
    js = tmp_path / "tb.json"
    write_chrome_json(trace, js, layout)
    sql = ("SELECT ts, end_ts, share_dur, wait_dur, edges_source, scope FROM graph_ann_critical_path_item "
           "ORDER BY ts")
    got = _sql_rows(js, sql)
    assert got and {r[4] for r in got} == {"edges"}
    assert got == _sql_rows(_converted(tmp_path, True), sql)


# ---- properties on random DAGs: slack checked by re-simulating the replay ------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def _dags(draw):
    n = draw(st.integers(1, 10))
    edges = sorted({(a, b) for b in range(n) for a in range(b) if draw(st.booleans()) and draw(st.booleans())})
    dur = [draw(st.integers(0, 50)) for _ in range(n)]
    lag = [draw(st.integers(0, 20)) for _ in range(n)]
    return n, edges, dur, lag


def _simulate(n, edges, dur, lag, launch, delay=None):
    """Each node starts ``lag`` after its last predecessor ends (or after ``launch``); ``delay``:
    (node, d) ends that node d later. Returns (start, end) per node."""
    preds = {k: [a for a, b in edges if b == k] for k in range(n)}
    start, end = [0] * n, [0] * n
    for k in range(n):  # edges go from lower to higher ids: a topological order
        release = max((end[p] for p in preds[k]), default=launch)
        start[k] = release + lag[k]
        end[k] = start[k] + dur[k] + (delay[1] if delay and delay[0] == k else 0)
    return start, end


@given(_dags())
@settings(max_examples=150, deadline=None)
def test_path_and_slack_agree_with_a_re_simulation(dag):
    n, edges, dur, lag = dag
    launch = 1_000
    start, end = _simulate(n, edges, dur, lag, launch)
    g = GraphRecord(EX, tuple(NodeRecord((EX << 32) | k, "kernel") for k in range(n)),
                    edges=tuple(GraphEdge(a, b) for a, b in edges))
    wp, rank = cp.work_predecessors(g)
    items = [cp.Item(500 + k, start[k], end[k], 0, k) for k in range(n)]
    path = cp.edges_path(items, wp, rank, launch)
    total = max(end)
    assert path.end_ns == total
    assert sum(it.share_ns + it.wait_ns for it in path.items) == total - launch
    nodes = [it.index - 500 for it in path.items]
    assert all((a, b) in edges for a, b in zip(nodes, nodes[1:]))  # a chain of the graph
    assert not any(p for p in wp[nodes[0]])  # from a root
    for k in range(n):
        s = path.slack[500 + k]
        assert s >= 0
        assert max(_simulate(n, edges, dur, lag, launch, (k, s))[1]) == total  # s later: no later end
        assert max(_simulate(n, edges, dur, lag, launch, (k, s + 1))[1]) == total + 1  # one more ns: later
        if k in nodes:
            assert s == 0


@given(_dags(), st.integers(0, 3), st.booleans(), st.booleans())
@settings(max_examples=300, deadline=None)
def test_compiled_path_and_slack_is_the_python_computation(dag, squash, no_launch, stream_order):
    """``critical_path.PATH_AND_SLACK`` (``join/_rows.c``) against the Python loops: the same path,
    releases and slack, on random DAGs with times squashed into ties (equal ends and starts: the
    index breaks them), without a launch time, and in stream order."""
    if cp.PATH_AND_SLACK is None:
        pytest.skip("the join's compiled loops (_rows) are not built or turned off")
    n, edges, dur, lag = dag
    start, end = _simulate(n, edges, dur, lag, 1_000)
    if squash:  # coarse times: many ties
        start, end = [s // (10 * squash) for s in start], [e // (10 * squash) for e in end]
    g = GraphRecord(EX, tuple(NodeRecord((EX << 32) | k, "kernel") for k in range(n)),
                    edges=tuple(GraphEdge(a, b) for a, b in edges))
    wp, rank = cp.work_predecessors(g)
    items = [cp.Item(900 - 3 * k, start[k], end[k], k % 2, k) for k in range(n)]
    launch = None if no_launch else 0
    got = {}
    for name, fn in (("c", cp.PATH_AND_SLACK), ("python", None)):
        saved, cp.PATH_AND_SLACK = cp.PATH_AND_SLACK, fn
        try:
            got[name] = cp.stream_order_path(items, launch) if stream_order else cp.edges_path(items, wp, rank, launch)
        finally:
            cp.PATH_AND_SLACK = saved
    assert got["c"] == got["python"]


# ---- SQL stream order against the Python module, with overlapping kernels on a stream --------

@requires_portable
def test_sql_stream_order_matches_the_python_module(tmp_path: Path):
    """Random replays on 3 streams, some kernels overlapping their predecessor on the stream
    (written to .pftrace, which keeps overlaps: Perfetto's JSON importer would drop them);
    replays far apart (no queueing). The SQL's path, shares, waits and per-lane slack equal
    ``stream_order_path``'s on the same events."""
    import random

    from support.sql_synth import _Builder

    from perfetto_graph_ann.pipeline.convert import convert

    rnd = random.Random(35)
    b = _Builder()
    launches = {}
    t = 10_000
    for _ in range(6):
        c = b.next_corr()
        b.cpu("cudaGraphLaunch", t, 20, c)
        launches[c] = t
        for s in (7, 8, 9):
            ts = t + rnd.randrange(1_000, 3_000)
            for _ in range(rnd.randrange(1, 5)):
                dur = rnd.randrange(100, 2_000)
                b.gpu(f"k{s}", ts, dur, s, c)
                ts += dur + rnd.randrange(-1_200, 400)  # negative: overlaps the previous kernel on the stream
        t += 100_000
    src = tmp_path / "so.json"
    b.finish(src, 0, t)
    trace = read_trace(src)
    out = tmp_path / "so.pftrace"
    convert(trace, out)
    exp_items, exp_lanes = {}, {}
    for c, lts in launches.items():
        items = [cp.Item(e.index, e.ts_ns, e.ts_ns + e.dur_ns, e.stream) for e in trace.events
                 if e.is_gpu_work and e.correlation == c]
        p = cp.stream_order_path(items, lts)
        exp_items[lts] = [(it.start, it.end, it.share_ns, it.wait_ns) for it in p.items]
        for it in items:
            key = (lts, it.stream)
            exp_lanes[key] = min(exp_lanes.get(key, 1 << 62), p.slack[it.index])
    from perfetto_graph_ann.query.session import open_trace

    with open_trace(out, engine="portable") as s:
        s.query("INCLUDE PERFETTO MODULE graph_ann.critical_path")
        rows = s.query("SELECT l.ts AS lts, i.ts, i.end_ts, i.share_dur, i.wait_dur FROM graph_ann_critical_path_item "
                       "AS i JOIN slice AS l ON l.id = i.launch_id ORDER BY l.ts, i.position").tuples()
        lanes = s.query("SELECT l.ts AS lts, c.lane_id, c.slack_dur FROM graph_ann_critical_path_lane AS c "
                        "JOIN slice AS l ON l.id = c.launch_id").tuples()
    got = {}
    for lts, *rest in rows:
        got.setdefault(lts, []).append(tuple(rest))
    assert got == exp_items
    # the data has overlaps on a stream, and at least one that breaks a run (the earlier kernel
    # ends after the later one): the cases the SQL's run logic is there for
    runs = {}
    for e in trace.events:
        if e.is_gpu_work:
            runs.setdefault((e.correlation, e.stream), []).append((e.ts_ns, e.ts_ns + e.dur_ns))
    pairs = [(a, b) for v in runs.values() for a, b in zip(sorted(v), sorted(v)[1:])]
    assert any(a[1] > b[0] for a, b in pairs) and any(a[1] > b[1] for a, b in pairs)
    assert {(lts, lane): sl for lts, lane, sl in lanes} == exp_lanes


def test_driver_edge_record_decoding():
    """The driver backend's edge arrays as ``cuGraphGetEdges_v2`` fills them: handles, and per
    edge 8 bytes of ``CUgraphEdgeData`` (from_port, to_port, type, 5 reserved)."""
    import ctypes

    from perfetto_graph_ann.capture.backends.driver import CudaGraphBackend

    frm = (ctypes.c_size_t * 3)(0x10, 0x11, 0x12)
    to = (ctypes.c_size_t * 3)(0x20, 0x21, (1 << 64) - 8)
    data = (ctypes.c_uint8 * 24)()
    data[8 + 0], data[8 + 1], data[8 + 2] = 2, 0, 1  # edge 1: from_port 2, programmatic
    decode = CudaGraphBackend.decode_edges
    assert decode(None, (3, frm, to, data)) == [(0x10, 0x20, 0, 0), (0x11, 0x21, 1, 2), (0x12, (1 << 64) - 8, 0, 0)]
    assert decode(None, (3, frm, to, None)) == [(0x10, 0x20, 0, 0), (0x11, 0x21, 0, 0), (0x12, (1 << 64) - 8, 0, 0)]
    assert decode(None, (0, None, None, None)) == []


# ---- annotate_replays' compiled work on a replay (REPLAY_PATH) against its Python loop -----

_ODDITIES = ("none", "unmatched", "ambiguous", "untimed", "node twice", "not work", "no dur", "no launch ts",
             "shuffled", "str ts")


@given(_dags(), st.sampled_from(_ODDITIES), st.integers(0, 1 << 16), st.booleans(), st.booleans())
@settings(max_examples=300, deadline=None)
def test_compiled_replay_path_is_annotate_replays_python_loop(dag, oddity, seed, compact, edge_flows):
    """``critical_path.REPLAY_PATH`` (``join/_rows.c``) against ``annotate_replays``' Python loop
    on one replay of a random DAG (with an empty node, not GPU work, in the graph): the same
    path and slack args on every event (in a dict of placements and in a CompactPlacements'
    column), the same counts and dependency flows, the same error, with each way a replay can
    be refused."""
    import random

    from perfetto_graph_ann.join.match import Match
    from perfetto_graph_ann.join.model import CompactPlacements, Placement
    from perfetto_graph_ann.join.replays import Replay
    from perfetto_graph_ann.read.model import TraceEvent

    if cp.REPLAY_PATH is None:
        pytest.skip("the join's compiled loops (_rows) are not built or turned off")
    rnd = random.Random(seed)
    n, edges, dur, lag = dag
    start, end = _simulate(n, edges, dur, lag, 1_000)
    nodes = [NodeRecord((EX << 32) | k, "kernel") for k in range(n)] + [NodeRecord((EX << 32) | n, "empty")]
    g = GraphRecord(EX, tuple(nodes), edges=tuple(GraphEdge(a, b) for a, b in edges) + (GraphEdge(n, 0),))
    events = [TraceEvent(10 + k, "X", "kernel", f"k{k}", 0, 7, start[k], end[k] - start[k], {"stream": 7})
              for k in range(n)]
    matches = {e.index: Match(nodes[k], "calibrated") for k, e in enumerate(events)}
    launch = TraceEvent(5, "X", "cuda_runtime", "cudaGraphLaunch", 0, 1, 500, 10, {"correlation": 1})
    j = rnd.randrange(n)
    if oddity == "unmatched":
        del matches[events[j].index]
    elif oddity == "ambiguous":
        matches[events[j].index] = Match(nodes[j], "structural", ambiguous=True)
    elif oddity == "untimed":
        events[j] = events[j].replace(ts_ns=None)
    elif oddity == "node twice" and n > 1:
        matches[events[j].index] = Match(nodes[(j + 1) % n], "calibrated")
    elif oddity == "not work":
        matches[events[j].index] = Match(nodes[n], "calibrated")
    elif oddity == "no dur":
        events[j] = events[j].replace(dur_ns=None)
    elif oddity == "no launch ts":
        launch = launch.replace(ts_ns=None)
    elif oddity == "shuffled":
        rnd.shuffle(events)
    elif oddity == "str ts":
        events[j] = events[j].replace(ts_ns="12")
    replay = Replay(1, launch, events)
    ranges = [type("R", (), {"kind": "replay", "launch": launch.index, "args": {"graph id": EX}})()]
    got = {}
    for name, fn in (("c", cp.REPLAY_PATH), ("python", None)):
        if compact:
            placements = CompactPlacements(len(events) + 20, True)
            for e in events:
                placements.put(e.index, Placement(7, {"graph id": EX}))
        else:
            placements = {e.index: Placement(7, {"graph id": EX}) for e in events}
        counts: Dict[str, int] = {}
        saved, cp.REPLAY_PATH = cp.REPLAY_PATH, fn
        try:
            try:
                flows = cp.annotate_replays([replay], matches, {1: EX}, ranges, {EX: g}, placements, counts,
                                            edge_flows=edge_flows)
                outcome = None
            except Exception as e:  # noqa: BLE001: the same error from both
                outcome, flows = type(e), None
        finally:
            cp.REPLAY_PATH = saved
        got[name] = (outcome, counts, {i: dict(p.args) for i, p in placements.items()}, flows)
    assert got["c"] == got["python"]
    if oddity in ("none", "no dur", "no launch ts", "shuffled"):
        assert got["c"][1] == {cp.SOURCE_EDGES: 1}
        assert not edge_flows or len(got["c"][3]) == len(edges)  # every edge between two kernels
        wp, rank = cp.work_predecessors(g)
        assert cp.REPLAY_PATH(events, matches, wp, rank, launch.ts_ns) not in (None, False)  # C did it
    if oddity in ("unmatched", "ambiguous", "untimed", "not work") or (oddity == "node twice" and n > 1):
        assert got["c"][1] == {cp.REASON_AMBIGUOUS: 1}
    if oddity == "str ts":
        assert got["c"][0] is TypeError
