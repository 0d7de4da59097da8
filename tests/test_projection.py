"""GPU projection (issue 21): graph replay and scope slices on the GPU, the track tree.

Expectations come from the fixture JSON and capture records (json module, Decimal
times) and from the synthetic generator's ground truth, never from the code under test.
Written traces are read back with the independent protobuf decoder (tests/support/pftrace_decode).
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Tuple

import pytest

from support import scope_synth
from support.join_expect import calibrated_expectation, fixture_capture, fixture_trace, load_capture, strip_calibration
from support.pftrace_decode import decode, projected_slices as _by_cat
from support.sql_expect import load_events, ns
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.join import join
from perfetto_graph_ann.join.projection import REASON_GRAPH_GUESS, REASON_SCOPE_GUESS
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.pipeline.convert import convert

Range = Tuple[int, int, int]  # ts, end, kernel count


def _span(items) -> Range:
    items = list(items)
    return min(s for s, _ in items), max(e for _, e in items), len(items)


def fixture_expectation(name: str):
    """(replay -> range, (replay, scope name) -> range) from the JSON and the capture record."""
    events = load_events(fixture_trace(name))
    cap = load_capture(name)
    exec_id = cap["exec_cupti_graph_id"]
    handle = {(exec_id << 32) | (n["cupti_node_id"] & 0xFFFFFFFF): n["handle"] for n in cap["nodes"]}
    members = {s["name"]: set(s["nodes"]) for s in cap["scopes"]}
    per_replay = defaultdict(list)
    per_scope = defaultdict(list)
    for idx, x in calibrated_expectation(name).items():
        e = events[idx]
        iv = (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
        per_replay[x["replay"]].append(iv)
        for scope, hs in members.items():
            if handle[x["key"]] in hs:
                per_scope[(x["replay"], scope)].append(iv)
    return ({r: _span(v) for r, v in per_replay.items()}, {k: _span(v) for k, v in per_scope.items()}, exec_id,
            len(members))


def _written(tmp_path: Path, trace, layout):
    out = tmp_path / "out.pftrace"
    convert(trace, out, layout=layout)
    return decode(out)


def _with_node_ids(trace, name):
    """The trace as newer Kineto writes it: graph id / graph node id on every kernel."""
    expect = calibrated_expectation(name)
    events = [e.replace(args=dict(e.args, **{"graph id": expect[e.index]["graph"],
                                             "graph node id": expect[e.index]["key"]}))
              if e.index in expect else e for e in trace.events]
    return dataclasses.replace(trace, events=events)


@pytest.mark.parametrize("graph_lanes", ["all", "none"])
@pytest.mark.parametrize("strategy", ["exact", "calibrated", "structural"])
@pytest.mark.parametrize("name", ["seed_block_annotated", "two_branch"])
def test_fixture_scope_and_replay_slices_match_the_json(tmp_path, name, strategy, graph_lanes):
    replays, scopes, exec_id, n_scopes = fixture_expectation(name)
    trace = read_trace(fixture_trace(name))
    ann = read_capture_record(fixture_capture(name))
    if strategy == "exact":
        trace, ann = _with_node_ids(trace, name), strip_calibration(ann)
    elif strategy == "structural":
        ann = strip_calibration(ann)
    layout = join(trace, ann, graph_lanes)
    assert layout.report.matched[strategy] == layout.report.graphed
    d = _written(tmp_path, trace, layout)

    got_replays = {s.args["replay"]: s for s in _by_cat(d, "graph_replay")}
    assert {r: (s.ts, s.ts + s.dur, s.args["kernel count"]) for r, s in got_replays.items()} == replays
    for r, s in got_replays.items():
        assert s.name == f"graph {exec_id} #{r}" and s.args["graph id"] == exec_id
        assert d.track_name(s.track) == "graph replays"

    got = {(s.args["replay"], s.name): (s.ts, s.ts + s.dur, s.args["kernel count"])
           for s in _by_cat(d, "gpu_scope")}
    if name == "two_branch" and strategy == "structural":
        # the two branches' GEMMs are identical: which is left and which right is a guess,
        # so those two scopes are not drawn; combine is
        scopes = {k: v for k, v in scopes.items() if k[1] == "combine"}
        assert layout.report.unprojected_scopes == {REASON_SCOPE_GUESS: 2 * len(replays)}
    else:
        assert len(_by_cat(d, "gpu_scope")) == n_scopes * len(replays)
        assert layout.report.unprojected_scopes == {}
    assert layout.report.unprojected_replays == {}
    assert got == scopes
    for s in _by_cat(d, "gpu_scope"):
        assert d.track_name(s.track) == "scopes"
        assert s.args.get("scope path", s.name) == s.name and 0 < s.args["busy ns"] <= s.dur


def test_replay_slices_have_a_flow_from_their_launch(tmp_path):
    name = "seed_block_annotated"
    events = load_events(fixture_trace(name))
    launch_ts = {e["args"]["correlation"]: ns(e["ts"]) for e in events if e.get("name") == "cudaGraphLaunch"}
    first = sorted(launch_ts.values())
    trace = read_trace(fixture_trace(name))
    d = _written(tmp_path, trace, join(trace, read_capture_record(fixture_capture(name))))
    flows = [(src, dst) for src, dst in d.flows() if dst.cat == "graph_replay"]
    assert len(flows) == len(_by_cat(d, "graph_replay")) == len(first)
    for src, dst in flows:
        assert src.name == "cudaGraphLaunch"
        assert dst.args["replay"] == first.index(src.ts)
        assert dst.args["launch latency ns"] == dst.ts - src.ts > 0


def _roots(d):
    return {u: t for u, t in d.tracks.items() if not t.HasField("parent_uuid") and not t.HasField("thread")}


def test_bookkeeping_goes_into_one_torch_profiler_group(tmp_path):
    name = "two_branch"
    trace = read_trace(fixture_trace(name))
    d = _written(tmp_path, trace, join(trace, read_capture_record(fixture_capture(name))))
    top = {d.track_name(u) for u in _roots(d)}
    assert not top & {"Spans", "Traces", "-1", "(no pid)"}
    assert "torch.profiler" in top and "GPU 0" in top
    prof = next(u for u, t in _roots(d).items() if t.name == "torch.profiler")
    children = {t.name for t in d.tracks.values() if t.parent_uuid == prof}
    events = load_events(fixture_trace(name))
    # every non-process pid of the JSON that has a timed event is a child group, nothing else
    expect = {("(no pid)" if e["pid"] == "" else str(e["pid"])) for e in events
              if e.get("ph") != "M" and "ts" in e and not (isinstance(e["pid"], int) and e["pid"] >= 0)}
    assert children == expect
    gpu = next(u for u, t in _roots(d).items() if t.name == "GPU 0")
    kids = sorted((t.sibling_order_rank, t.name) for t in d.tracks.values() if t.parent_uuid == gpu)
    assert [n for _, n in kids[:2]] == ["graph replays", "scopes"]


# ---- synthetic nested scopes ----------------------------------------------------------------

def synth_expectation(truth, layers):
    """(graph, replay) -> range; (graph, replay, path) -> range, from the ground truth."""
    rep, sc = defaultdict(list), defaultdict(list)
    for k in truth:
        iv = (k.ts, k.end)
        rep[(k.graph, k.replay)].append(iv)
        sc[(k.graph, k.replay, f"layer {k.layer}")].append(iv)
        sc[(k.graph, k.replay, f"layer {k.layer} / {k.part}")].append(iv)
    return {k: _span(v) for k, v in rep.items()}, {k: _span(v) for k, v in sc.items()}


@pytest.mark.parametrize("graph_lanes", ["all", "none"])
@pytest.mark.parametrize("strategy", ["exact", "calibrated", "structural"])
def test_synthetic_nested_scopes(tmp_path, strategy, graph_lanes):
    layers = 3
    src = tmp_path / "synth.json"
    truth = scope_synth.write_trace(src, layers=layers, strategy=strategy)
    trace = read_trace(src)
    layout = join(trace, scope_synth.annotations(layers, strategy), graph_lanes)
    assert layout.report.matched[strategy] == len(truth)
    d = _written(tmp_path, trace, layout)
    replays, scopes = synth_expectation(truth, layers)
    names = {exec_id: name for exec_id, name, _ in scope_synth.GRAPHS}

    got_r = {(s.args["graph id"], s.args["replay"]): s for s in _by_cat(d, "graph_replay")}
    assert {k: (s.ts, s.ts + s.dur, s.args["kernel count"]) for k, s in got_r.items()} == replays
    for (g, r), s in got_r.items():
        assert s.name == f"{names[g]} #{r}"

    got = _by_cat(d, "gpu_scope")
    assert len(got) == 3 * layers * len(replays)  # layer, attn, mlp per layer and replay
    assert {(s.args["graph id"], s.args["replay"], s.args.get("scope path", s.name)): (s.ts, s.ts + s.dur, s.args["kernel count"])
            for s in got} == scopes
    for s in got:
        assert s.name == (s.args.get("scope path", s.name).split(" / ")[-1])
        assert ("scope path" in s.args) == (s.name in ("attn", "mlp"))  # nested scopes carry their path
    # the attention kernels overlap on two streams: busy < span for attn, = sum for mlp's serial pair
    for s in got:
        if s.name == "attn":
            assert s.args["busy ns"] < sum(k.end - k.ts for k in truth if k.graph == s.args["graph id"]
                                           and k.replay == s.args["replay"] and k.part == "attn"
                                           and f"layer {k.layer} / attn" == s.args.get("scope path", s.name))


def test_synthetic_scopes_nest_in_trace_processor(tmp_path):
    """Loaded in the trace processor: attn / mlp are children (depth 1) of their layer slice."""
    from perfetto_graph_ann.query.session import open_trace

    src = tmp_path / "synth.json"
    scope_synth.write_trace(src, layers=2)
    trace = read_trace(src)
    out = tmp_path / "s.pftrace"
    convert(trace, out, layout=join(trace, scope_synth.annotations(2, "exact")))
    with open_trace(out) as s:
        rows = s.query("SELECT s.name, s.depth, p.name AS parent, t.name AS track FROM slice s "
                       "LEFT JOIN slice p ON s.parent_id = p.id JOIN track t ON s.track_id = t.id "
                       "WHERE s.category = 'gpu_scope'").tuples()
    assert len(rows) == 6 * 5
    for name, depth, parent, track in rows:
        assert track == "scopes"
        if name.startswith("layer"):
            assert depth == 0 and parent is None
        else:
            assert depth == 1 and parent.startswith("layer ")


def test_derived_scopes_without_a_scope_table(tmp_path):
    """No scope table (old sidecars): one flat instance per run of equal merged annotations."""
    layers = 3
    src = tmp_path / "synth.json"
    truth = scope_synth.write_trace(src, layers=layers)
    trace = read_trace(src)
    d = _written(tmp_path, trace, join(trace, scope_synth.annotations(layers, "exact", recorded=False)))
    got = {(s.args["graph id"], s.args["replay"], s.name): (s.ts, s.ts + s.dur)
           for s in _by_cat(d, "gpu_scope")}
    exp = defaultdict(list)
    for k in truth:
        exp[(k.graph, k.replay, f"{k.part} layer={k.layer}")].append((k.ts, k.end))
    assert got == {k: _span(v)[:2] for k, v in exp.items()}
    assert all(s.args.get("scope path", s.name) == s.name for s in _by_cat(d, "gpu_scope"))


def test_no_annotations_no_projection(tmp_path):
    name = "seed_block_annotated"
    trace = read_trace(fixture_trace(name))
    d = _written(tmp_path, trace, None)
    assert not _by_cat(d, "graph_replay") and not _by_cat(d, "gpu_scope")


def test_projection_can_be_turned_off(tmp_path):
    name = "two_branch"
    trace = read_trace(fixture_trace(name))
    layout = join(trace, read_capture_record(fixture_capture(name)), projection=False)
    d = _written(tmp_path, trace, layout)
    assert not _by_cat(d, "graph_replay") and not _by_cat(d, "gpu_scope")
    assert not any(t.name in ("graph replays", "scopes") for t in d.tracks.values())


def test_a_tie_between_graphs_names_both_and_draws_no_scope():
    """Two identical graphs (a recapture) with equal annotations, no replay record: the join
    cannot tell which replayed, so each replay slice names both candidates (no graph id, no
    number), no scope is drawn, and every kernel keeps the annotation both give it, without
    a graph id."""
    name = "seed_block_annotated"
    trace = read_trace(fixture_trace(name))
    g = strip_calibration(read_capture_record(fixture_capture(name))).graphs[0]
    twin = dataclasses.replace(g, exec_id=g.exec_id + 100, name="twin", nodes=tuple(
        dataclasses.replace(n, key=((g.exec_id + 100) << 32) | n.local_id) for n in g.nodes))
    from perfetto_graph_ann.annotations.model import AnnotationSet

    layout = join(trace, AnnotationSet(graphs=(g, twin)))
    assert layout.report.ambiguous == layout.report.graphed > 0
    launches = [e for e in load_events(fixture_trace(name)) if e.get("name") == "cudaGraphLaunch"]
    assert [r.kind for r in layout.ranges] == ["replay"] * len(launches)
    assert {r.name for r in layout.ranges} == {f"{g.display_name} | twin"}
    assert all("graph id" not in r.args and "replay" not in r.args for r in layout.ranges)
    assert layout.report.shared_label_replays == {f"{g.display_name} | twin": len(launches)}
    assert layout.report.unprojected_replays == {}
    for p in layout.placements.values():
        assert "graph id" not in p.args and "graph node id" not in p.args and "replay" not in p.args
        assert p.args["graph candidates"] == f"{g.display_name} | twin" and "name" in p.args


def test_replay_identity_left_off_only_where_implied():
    """`graph id` / `replay` stay on a scope range unless its replay is the only replay range
    on its device that starts last at or before it, and overlaps no other replay there."""
    from perfetto_graph_ann.join.projection import REPLAY, SCOPE, GpuRange, _drop_implied_replay

    def rep(dev, ts, gid, idx):
        return GpuRange(REPLAY, dev, "graph replays", ts, 100, f"g #{idx}", {"graph id": gid, "replay": idx})

    def scope(dev, ts, gid, idx):
        return GpuRange(SCOPE, dev, "scopes", ts, 10, "s", {"graph id": gid, "replay": idx, "kernel count": 1})

    ranges = [
        rep(0, 0, 1, 0), scope(0, 0, 1, 0), scope(0, 20, 1, 0), scope(0, 60, 1, 0),
        rep(0, 50, 2, 0), scope(0, 55, 2, 0),  # 2#0 starts inside 1#0: both keep their ids everywhere
        rep(1, 50, 1, 1), scope(1, 50, 1, 1),  # another device: its own order
        rep(0, 200, 1, 2), rep(0, 200, 2, 1), scope(0, 210, 1, 2), scope(0, 210, 2, 1),  # equal starts
        rep(0, 300, 1, 3), scope(0, 300, 1, 3), scope(0, 390, 1, 3),  # touches the pair above: not concurrent
        rep(0, 500, 2, 2), scope(0, 510, 2, 2),
        rep(0, 520, 1, 4), scope(0, 530, 1, 4),  # nested in 2#2's span: both keep their ids
    ]
    _drop_implied_replay(ranges)
    kept = [("graph id" in r.args, "replay" in r.args) for r in ranges if r.kind == SCOPE]
    assert [a for a, _ in kept] == [b for _, b in kept]
    assert [a for a, _ in kept] == [True, True, True, True, False, True, True, False, False, True, True]
    assert all(r.args["kernel count"] == 1 for r in ranges if r.kind == SCOPE)
