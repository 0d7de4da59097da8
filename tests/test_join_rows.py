"""The join's per-replay loops in C (``join/_rows.c``: ``join.ROW_LOOPS``, ``projection.LOOPS``)
against the loops in Python (``join._place_compact``, ``join._lane_names``,
``projection._collect_work``, ``projection.busy_ns``): the same placements (columns, rows kept
whole and their order), report, lane names and projected ranges, on fixtures under both lane options, the decoder
with and without its replay record, events made odd where the join looks, replays shared by
twin graphs (placements with candidates), eager kernels among cut replays, and replay numbers
beyond the int32 columns. The digest and two-pass tests check the bytes with the loops on."""
from __future__ import annotations

import dataclasses
import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.files import load_annotations
from perfetto_graph_ann.join import join, projection
from perfetto_graph_ann.join.model import CompactPlacements
from perfetto_graph_ann.read import kineto
from support import scope_synth
from support.join_expect import strip_calibration
from test_convert_two_pass_join import _decoder, _odd_trace
from test_replay_record import SEQ, twins, write_trace

join_mod = importlib.import_module("perfetto_graph_ann.join.join")  # the package exports the function by that name
PROJECTION_LOOPS = projection.LOOPS
pytestmark = pytest.mark.skipif(join_mod.ROW_LOOPS is None or PROJECTION_LOOPS is None,
                                reason="the join's compiled loops (_rows) are not built or turned off")


def _layout_state(trace, ann, lanes, loops, monkeypatch, **kw):
    monkeypatch.setattr(join_mod, "ROW_LOOPS", loops)
    monkeypatch.setattr(projection, "LOOPS", None if loops is None else PROJECTION_LOOPS)
    layout = join(trace, ann, graph_lanes=lanes, compact=True, **kw)
    p = layout.placements
    assert isinstance(p, CompactPlacements)
    return dict(columns=[bytes(c) if isinstance(c, (bytearray, bytes)) else c.tolist() if hasattr(c, "tolist") else c
                         for c in (p.row, p.node, p.replay, p.hw, p.how, p.order)],
                nodes=p.nodes, kept=dict(p.kept), placements=dict(p), report=dataclasses.asdict(layout.report),
                lane_names=layout.lane_names, ranges=layout.ranges)


def _same(trace, ann, monkeypatch, lanes=("none", "all"), **kw):
    real = join_mod._compiled_place_rows, join_mod._compiled_lane_keys
    calls = []
    loops = (lambda *a: calls.append("rows") or real[0](*a), lambda *a: calls.append("lanes") or real[1](*a))
    got = {}
    for lane in lanes:
        got[lane] = _layout_state(trace, ann, lane, loops, monkeypatch, **kw)
        want = _layout_state(trace, ann, lane, None, monkeypatch, **kw)
        assert got[lane] == want
    assert "rows" in calls and ("lanes" in calls or "all" not in lanes)
    return got


@pytest.mark.parametrize("name", ["seed_block_annotated", "two_branch"])
def test_fixtures(name, monkeypatch):
    trace = kineto.read_trace(fixture_trace(name))
    got = _same(trace, load_annotations(fixture_capture(name)), monkeypatch)
    assert got["all"]["lane_names"] and got["all"]["placements"]


def test_structural_ambiguous(monkeypatch):
    """The two-branch graph without its calibration: identical GEMMs matched structurally, ambiguous."""
    trace = kineto.read_trace(fixture_trace("two_branch"))
    got = _same(trace, strip_calibration(load_annotations(fixture_capture("two_branch"))), monkeypatch)
    assert got["all"]["report"]["ambiguous"] == 10


@pytest.mark.parametrize("record", [False, True], ids=["calibrated", "replay record"])
def test_decoder(record, tmp_path, monkeypatch):
    src, ann = _decoder(tmp_path, replays=3, layers=2, record=record)
    _same(kineto.read_trace(str(src)), load_annotations(ann), monkeypatch)


def test_odd_events(tmp_path, monkeypatch):
    src, ann = _odd_trace(tmp_path)
    got = _same(kineto.read_trace(str(src)), load_annotations(ann), monkeypatch, force=True)
    assert got["all"]["kept"]  # events placed by placement()'s rule (unmatched or odd)


def test_twins_shared_by_candidates(tmp_path, monkeypatch):
    write_trace(tmp_path / "t.json", SEQ)
    got = _same(kineto.read_trace(str(tmp_path / "t.json")), twins(same_names=True), monkeypatch)
    assert any("graph candidates" in p.args for p in got["none"]["placements"].values())


def test_eager_kernels_among_cut_replays(tmp_path, monkeypatch):
    launches = [scope_synth.Launch(g, start) for g, start in ((0, 0), (1, 30_000), (0, 90_000), (1, 95_000),
                                                               (0, 400_000))]
    src = tmp_path / "t.json"
    scope_synth.write_schedule(src, launches, layers=2, strategy="calibrated", eager=9, window=(-45_000, 420_000))
    _same(kineto.read_trace(str(src)), scope_synth.annotations(2, "calibrated"), monkeypatch)


def test_replay_numbers_beyond_int32(tmp_path, monkeypatch):
    """A replay number that the int32 column cannot hold: its events' placements are made whole
    (``CompactPlacements.add``) between rows of the compiled loop, which flushes its rows first."""
    real = join_mod._replay_indices
    monkeypatch.setattr(join_mod, "_replay_indices",
                        lambda replays, graphs: {c: (i + (1 << 40) if k % 2 else i)
                                                 for k, (c, i) in enumerate(real(replays, graphs).items())})
    src, ann = _decoder(tmp_path, replays=4, layers=2)
    got = _same(kineto.read_trace(str(src)), load_annotations(ann), monkeypatch)
    assert got["none"]["kept"] and any(p.args.get("replay", 0) >= 1 << 40 for p in got["none"]["kept"].values())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=30), st.sampled_from(["ints", "odd"]))
def test_busy_ns(raw, kind):
    """``busy_ns`` in C against the Python loop: the same length of the union of sorted intervals;
    what it does not take (floats, ints beyond int64, not a list) is left to the loop."""
    ivs = sorted((s, s + d) for s, d in raw)
    if kind == "odd" and ivs:
        ivs[-1] = (float(ivs[-1][0]), ivs[-1][1] + (1 << 70))
    want = _python_busy(ivs)
    assert PROJECTION_LOOPS[1](ivs) in (None if kind == "odd" and ivs else want,)
    assert projection.busy_ns(ivs) == want and projection.busy_ns(tuple(ivs)) == want


def _python_busy(ivs):
    saved = projection.LOOPS
    projection.LOOPS = None
    try:
        return projection.busy_ns(ivs)
    finally:
        projection.LOOPS = saved


@pytest.mark.parametrize("trace", ["odd", "two_branch", "decoder"])
def test_compiled_signatures_are_the_python_loops(trace, tmp_path, monkeypatch):
    """``match.LOOSE`` (``replay_signatures``' loop in C) against ``match._loose``: the same
    signature per event, the same shared tuples, on grids and blocks that are not three ints,
    args the typed decode refused, memcpy / memset and unknown categories."""
    from perfetto_graph_ann.join import match
    from perfetto_graph_ann.join.replays import gpu_work_and_replays

    if match.LOOSE is None:
        pytest.skip("the join's compiled loops (_rows) are not built or turned off")
    src = _source(trace, tmp_path)
    got = {}
    real = match.LOOSE
    for name, loop in (("c", real), ("python", None)):
        monkeypatch.setattr(match, "LOOSE", loop)
        _, replays = gpu_work_and_replays(kineto.read_trace(str(src)))  # the in-memory read: an args dict an event
        assert replays
        got[name] = [match.replay_signatures(r) for r in replays]
    assert got["c"] == got["python"]
    assert all(a[i] is b[i] for ra, rb in zip(got["c"], got["python"]) for a, b in [(ra, rb)] for i in a)
    if trace == "odd":
        assert any(s[2] is None or s[3] is None for r in got["c"] for s in r.values())


@pytest.mark.parametrize("trace", ["odd", "two_branch", "seed_block_annotated", "decoder"])
def test_compiled_grouping_is_the_python_pass(trace, tmp_path, monkeypatch):
    """``replays.GROUP_WORK`` (``gpu_work_and_replays``' pass in C) against the Python pass: the
    same GPU work count and the same replays (launch, events in order), with driver launches, a
    launch name on another category, old category spellings, graph ids on work without a launch,
    correlations that are not ints."""
    from perfetto_graph_ann.join import replays as replays_mod

    if replays_mod.GROUP_WORK is None:
        pytest.skip("the join's compiled loops (_rows) are not built or turned off")
    src = _source(trace, tmp_path)
    events = kineto.read_trace(str(src))
    launch = next(e for e in events.events if e.ph == "X" and e.name in replays_mod.GRAPH_LAUNCH_NAMES
                  and e.correlation is not None)
    events.events.append(launch.replace(index=len(events.events), ts_ns=launch.ts_ns + 5))  # the first one counts
    got = {}
    for name, fn in (("c", replays_mod.GROUP_WORK), ("python", None)):
        monkeypatch.setattr(replays_mod, "GROUP_WORK", fn)
        every: list = []
        total, found = replays_mod.gpu_work_and_replays(events, every)
        assert replays_mod.gpu_work_and_replays(events)[0] == total  # without the launches asked for
        got[name] = (total, [(r.correlation, None if r.launch is None else r.launch.index, [e.index for e in r.events])
                             for r in found], [e.index for e in every])
    assert got["c"] == got["python"] and got["c"][0] and got["c"][1]
    # every launch, in file order, whatever its correlation: counted here from the events
    assert got["c"][2] == [e.index for e in events.events if e.ph == "X" and e.name in replays_mod.GRAPH_LAUNCH_NAMES]


def _source(trace, tmp_path):
    """The trace file of a test case: the odd events, the decoder, or a fixture by name."""
    if trace == "odd":
        return _odd_trace(tmp_path)[0]
    if trace == "decoder":
        return _decoder(tmp_path, replays=2, layers=2)[0]
    return fixture_trace(trace)


_CAL_ODDITIES = ("none", "cut", "extra", "bool stream", "no stream", "no grid", "other name", "pending", "kernels only",
                 "huge stream", "uncalibrated stream")


@given(st.integers(1, 12), st.integers(1, 3), st.sampled_from(_CAL_ODDITIES), st.integers(0, 1 << 16))
@settings(max_examples=200, deadline=None)
def test_compiled_calibrated_rows_are_the_python_loop(n, streams, oddity, seed):
    """``calibrated.CALIBRATED_ROWS`` (``_rows.calibrated_rows``) against ``match_calibrated``'s
    Python loop on one replay of a calibrated graph (kernels and a memset over a few streams):
    the same matches and graph, with a stream cut or grown (not trusted), a bool or missing
    stream arg (the tid's), a signature compatible but not equal (no grid) or not compatible (another
    name), only some events pending, a graph counting kernels alone, a stream beyond int64."""
    import random

    from perfetto_graph_ann.annotations.model import GraphRecord, NodeRecord
    from perfetto_graph_ann.join import calibrated
    from perfetto_graph_ann.join.replays import Replay
    from perfetto_graph_ann.read.model import TraceEvent

    if calibrated.CALIBRATED_ROWS is None:
        pytest.skip("the join's compiled loops (_rows) are not built or turned off")
    rnd = random.Random(seed)
    ex = 5
    kinds = ["kernel"] * n if oddity == "kernels only" else [rnd.choice(["kernel", "kernel", "memset"])
                                                              for _ in range(n)]
    stream_of = [7 + rnd.randrange(streams) for _ in range(n)]
    ordinal, nodes, events = {}, [], []
    for k in range(n):
        s = stream_of[k]
        o = ordinal[s] = ordinal.get(s, -1) + 1
        cat = "kernel" if kinds[k] == "kernel" else "gpu_memset"
        name = f"k{k}" if kinds[k] == "kernel" else "Memset"
        kernel = kinds[k] == "kernel"
        nodes.append(NodeRecord((ex << 32) | k, kinds[k], name if kernel else None, (4, 1, 1) if kernel else None,
                                (32, 1, 1) if kernel else None, {"name": f"n{k}"}, stream=s, ordinal=o))
        args = {"device": 0, "stream": s, "correlation": 1}
        if kinds[k] == "kernel":
            args.update(grid=[4, 1, 1], block=[32, 1, 1])
        events.append(TraceEvent(100 + k, "X", cat, name, 0, s, 1000 + 10 * k, 5, args))
    if oddity == "kernels only":  # the calibration counted kernels alone: a memset in the trace is skipped
        events.insert(rnd.randrange(n + 1), TraceEvent(99, "X", "gpu_memset", "Memset", 0, 7, 999, 1,
                                                       {"device": 0, "stream": 7, "correlation": 1}))
    j = rnd.randrange(len(events))
    e = events[j]
    if oddity == "cut":
        del events[j]
    elif oddity == "extra":
        events.append(e.replace(index=500, ts_ns=5000))
    elif oddity == "bool stream":
        events[j] = e.replace(args={**e.args, "stream": True})
    elif oddity == "no stream":
        events[j] = e.replace(args={k: v for k, v in e.args.items() if k != "stream"})
    elif oddity == "no grid" and e.cat == "kernel":
        events[j] = e.replace(args={k: v for k, v in e.args.items() if k != "grid"})
    elif oddity == "other name" and e.cat == "kernel":
        events[j] = e.replace(name="other")
    elif oddity == "huge stream":
        events[j] = e.replace(args={**e.args, "stream": 1 << 70}, tid=1 << 70)
    elif oddity == "uncalibrated stream":
        events[j] = e.replace(args={**e.args, "stream": 99}, tid=99)
    g = GraphRecord(ex, tuple(nodes))
    pending = [x.index for x in events if oddity != "pending" or rnd.random() < 0.5]
    got = {}
    for name, fn in (("c", calibrated.CALIBRATED_ROWS), ("python", None)):
        calls = []
        saved = calibrated.CALIBRATED_ROWS
        calibrated.CALIBRATED_ROWS = fn and (lambda *a: calls.append(fn(*a)) or calls[-1])
        try:
            found, chosen = calibrated.match_calibrated(Replay(1, None, list(events)), [g], pending)
        finally:
            calibrated.CALIBRATED_ROWS = saved
        got[name] = ({i: (m.node.key, m.strategy, m.ambiguous) for i, m in found.items()}, chosen)
        if fn is not None and oddity != "huge stream":
            assert calls and calls[0] is not None  # C did it
    assert got["c"] == got["python"]
    if oddity == "none":
        assert len(got["c"][0]) == n


@given(st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=12))
def test_replay_events_by_start_with_untimed_ones(times):
    """``replays.by_start`` (the key made in C) orders a replay's events as the rule does: by
    start, an untimed one as if at 0, then file index."""
    from perfetto_graph_ann.join.replays import by_start
    from perfetto_graph_ann.read.model import TraceEvent

    events = [TraceEvent(20 - k, "X", "kernel", "k", 0, 7, t, 1) for k, t in enumerate(times)]
    assert by_start(events) == sorted(events, key=lambda e: (e.ts_ns or 0, e.index))


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([1 << 62, -(1 << 63), 1 << 64]),
                                    st.just(True)),
                          st.integers(-2, 6)), max_size=12))
def test_events_already_in_start_order_are_returned_as_the_sort_would_put_them(keys):
    """``replays.by_start`` with ``IN_START_ORDER`` (a list already in (start, index) order is
    not sorted) against the sort alone: the same events in the same order, for times that tie,
    go back, are None, a bool or beyond 64 bits, and indices that tie or go back."""
    from perfetto_graph_ann.join import replays as replays_mod
    from perfetto_graph_ann.read.model import TraceEvent

    if replays_mod.IN_START_ORDER is None:
        pytest.skip("the join's compiled loops (_rows) are not built or turned off")
    events = [TraceEvent(index=i, ph="X", cat="kernel", name=f"k{k}", pid=0, tid=7, ts_ns=ts)
              for k, (ts, i) in enumerate(keys)]
    got = replays_mod.by_start(list(events))
    saved = replays_mod.IN_START_ORDER
    replays_mod.IN_START_ORDER = None
    try:
        want = replays_mod.by_start(list(events))
    finally:
        replays_mod.IN_START_ORDER = saved
    assert [id(e) for e in got] == [id(e) for e in want]
    ordered = sorted(events, key=lambda e: (e.ts_ns or 0, e.index))
    if all(type(e.ts_ns) is int and abs(e.ts_ns) < 1 << 63 for e in events):
        assert saved(ordered) is True  # an ordered list of int64 keys is told ordered


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(st.integers(-2, 12), st.sampled_from([-1, 0, 7, 1 << 40, -5, -2])), max_size=16),
       st.sets(st.integers(0, 9), max_size=4))
def test_path_rows_set_in_c_are_set_paths_python_loop(pairs, pinned):
    """``model.PATH_ROWS`` (``CompactPlacements.set_paths``' loop in C) against the Python loop:
    the same path column and args of the placements kept whole, for rows on the path, slacks,
    values only a kept placement holds (a negative slack), events kept whole before or made so
    by the loop (then a later value of the same event goes to its args), indices of events
    without a placement (the same error, the work before it done)."""
    from array import array

    from perfetto_graph_ann.join import model
    from perfetto_graph_ann.join.model import CompactPlacements, Placement

    if model.PATH_ROWS is None:
        pytest.skip("the join's compiled loops (_rows) are not built or turned off")
    indices, values = array("q", [i for i, _ in pairs]), array("q", [v for _, v in pairs])
    got = {}
    saved = model.PATH_ROWS
    for name, fn in (("c", saved), ("python", None)):
        p = CompactPlacements(12, True)
        for i in range(10):  # rows, but event 9 kept whole from the start
            if i == 9:
                p.put(i, Placement(7, {"graph id": 3, "layer": 0}))
            else:
                p.add(i, ("node", i % 3), (7, {"graph id": 3, "layer": i % 3}, None), 4, "calibrated", False, None)
        for i in pinned:
            p.pin(i)
        assert sum(r >= 0 for r in p.row) == 9 - len(pinned - {9})
        model.PATH_ROWS = fn
        try:
            p.set_paths(indices, values)
            error = None
        except Exception as e:  # noqa: BLE001: the same error from both
            error = type(e)
        finally:
            model.PATH_ROWS = saved
        got[name] = (error, None if p.path is None else p.path.tolist(), {i: dict(q.args) for i, q in p.kept.items()},
                     p.row.tolist())
    assert got["c"] == got["python"]
