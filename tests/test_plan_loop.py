"""The writer's plan loop in C (``write/perfetto/_plan.c``, ``plan.PLACE_LOOP``) against the loop in
Python (``plan._place``): the same plan, field for field, on fixtures with and without the
join, on the two-pass read's light events, and on a trace whose events leave the usual path
(counters, untimed events, flows with and without ids, every instant phase, other phases with
a duration, GPU events without an int device or stream, lanes beyond int32, string pids, wide
tids, placements kept whole and placements in a plain dict). The digest tests check the bytes
with the compiled loop on."""
from __future__ import annotations

import dataclasses
import json
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import fixture_capture, fixture_trace
from perfetto_graph_ann.join.model import CompactPlacements, LaneLayout, Placement, mutable_placement
from perfetto_graph_ann.pipeline.joined import read_and_join
from perfetto_graph_ann.read import kineto
from perfetto_graph_ann.read.scan import scan_trace
from perfetto_graph_ann.write.perfetto import plan as plan_mod
from perfetto_graph_ann.write.perfetto import overlap
from perfetto_graph_ann.write.perfetto.config import WriteStats
from perfetto_graph_ann.write.perfetto.tracks import TrackTable
from test_convert_two_pass_join import _decoder, _odd_trace

pytestmark = pytest.mark.skipif(plan_mod.PLACE_LOOP is None,
                                reason="the writer's compiled plan loop (_plan) is not built or turned off")


def _state(trace, layout, loop, monkeypatch, kinds_loop=None):
    """Everything ``plan_events`` decides, with ``loop`` as the plan loop and ``kinds_loop`` as its
    first walk (None: Python's)."""
    monkeypatch.setattr(plan_mod, "PLACE_LOOP", loop)
    monkeypatch.setattr(plan_mod, "KINDS_LOOP", kinds_loop)
    stats = WriteStats(events=len(trace.events))
    tracks = TrackTable(trace, layout.lane_names if layout is not None else None)
    plan = plan_mod.plan_events(trace, layout, tracks, stats)
    rewrite = plan.rewrite
    lanes = (rewrite.lanes.tolist(), rewrite.other) if isinstance(rewrite, plan_mod._Lanes) else dict(rewrite)
    return dict(gpu_pids=sorted(plan.gpu_pids, key=repr), kinds=plan.kinds.tolist(), homes=list(plan.by_home),
                spans={h: a.tolist() for h, a in plan.by_home.items()},
                rewrite=lanes, device_of=dict(plan.device_of), flows=list(plan.flow_indices),
                counters=list(plan.counter_records), stats=dataclasses.asdict(stats),
                starts=(plan.starts.ts.tolist() if len(plan.starts) else [], [e.index for e in plan.starts.events]),
                types=[type(v).__name__ for h in plan.by_home for v in h])


def _same_plan(trace, layout, monkeypatch):
    calls = []
    real, real_kinds = plan_mod._compiled_place_loop, plan_mod._compiled_kinds_loop
    got = _state(trace, layout, lambda *a: calls.append(1) or real(*a), monkeypatch,
                 lambda *a: calls.append(0) or real_kinds(*a))
    want = _state(trace, layout, None, monkeypatch)
    assert calls == [0, 1]
    assert got == want
    return got


def _odd_gpu_trace(tmp_path):
    """Events on a GPU pid and off it that leave the usual path, and a layout whose placements are
    a plain dict (lanes beyond int32, placements without args)."""
    k = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0, "dur": 1.0,
         "args": {"device": 0, "stream": 7, "correlation": 1}}
    cpu = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 11, "tid": 12, "ts": 9.0, "dur": 5.0, "args": {}}
    evs = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        k,
        dict(k, ts=11.0, args={"device": "0", "stream": 7}),  # a device arg that is not an int: the pid's
        dict(k, ts=12.0, args={"device": 0, "stream": True}),  # a bool stream: the tid's lane
        dict(k, ts=13.0, args={"device": 0}),  # no stream arg: the tid
        dict(k, ts=14.0, args={"device": 0, "stream": 1 << 40}),  # a lane beyond int32
        dict(k, ts=15.0, tid="stream x", args={"device": 0, "stream": "7"}),  # no int lane: a CPU-style home
        dict(k, ts=16.0, cat="gpu_memcpy", name="Memcpy", args={"device": 0, "stream": 8}),
        dict(k, ts=17.0, cat="Kernel", args={"device": 1, "stream": 7}),  # another device on the pid
        dict(k, ts=18.0, ph="b", id=3, args={"device": 0, "stream": 7}),  # another phase with a duration
        dict(k, ts=19.0, ph="i", dur=None, s="t"),
        dict(k, ts=20.0, cat="gpu_user_annotation", name="ann", args={"device": 0, "stream": 9}),
        {"ph": "C", "name": "mem", "pid": 0, "tid": 0, "ts": 20.5, "args": {"a": 1, "b": 2.5, "c": "x"}},
        {"ph": "C", "name": "cpu mem", "pid": 11, "tid": 0, "ts": 20.6, "args": {"v": 3}},
        cpu,
        dict(cpu, ts=21.0, pid="host", tid=12),  # a string pid: a named track
        dict(cpu, ts=22.0, tid=1 << 40),  # a wide tid
        dict(cpu, ts=23.0, tid=-1),
        dict(cpu, ts=24.0, ph="B", dur=None), dict(cpu, ts=25.0, ph="E", dur=None),
        dict(cpu, ts=26.0, ph="I", dur=None), dict(cpu, ts=27.0, ph="n", dur=None, id=4),
        dict(cpu, ts=28.0, ph="R", dur=None), dict(cpu, ts=29.0, ph="i", dur=2.0),
        dict(cpu, ts=30.0, ph="M", name="thread_sort_index", args={"sort_index": 3}),
        dict(cpu, ts=None, dur=None, ph="i"),  # untimed
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "pid": 11, "tid": 12, "ts": 9.0, "id": 1},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 10.0, "id": 1, "bp": "e"},
        {"ph": "t", "cat": "ac2g", "name": "no id", "pid": 11, "tid": 12, "ts": 9.5},
        {"ph": "s", "cat": "ac2g", "name": "untimed", "pid": 11, "tid": 12, "ts": None, "id": 5},
        dict(k, ts=32.0, cat="gpu_user_annotation", pid=3, name="user annotation on a pid of its own"),
        dict(cpu, ph="M", name="process_name", pid=3, ts=None, dur=None, args={"name": "after the events"}),
        dict(k, ts=34.0, cat="KERNEL", pid=4),  # its pid a GPU's by the category's normalised spelling only
        dict(cpu, ts=35.0), {"ph": "t", "cat": "ac2g", "name": "a step", "pid": 11, "tid": 12, "ts": 35.0, "id": 6},
        dict(k, ts=31.0, args={"device": 0, "stream": 7, "correlation": 2}),
        dict(k, ts=31.0, args={"device": 0, "stream": 7, "correlation": 3}),  # a tie
    ]
    for e in evs:
        if e.get("ts") is None:
            e.pop("ts", None)
        if e.get("dur") is None:
            e.pop("dur", None)
    src = tmp_path / "odd_gpu.json"
    src.write_text(json.dumps({"traceEvents": evs}))
    trace = kineto.read_trace(str(src))
    # a bool pid equal to the GPU's is not a GPU pid (the reader refuses one; a trace built in code may hold it)
    trace.events.append(trace.events[1].replace(index=len(trace.events), pid=False))
    trace.events.append(trace.events[1].replace(index=len(trace.events), pid=True))  # no GPU pid 1
    placements = {1: Placement(62, {"layer": 1, "graph id": 2}), 4: Placement(1 << 35, {"x": 1}),
                  5: Placement(7, {}), 7: Placement(None, {"y": 2}), 8: Placement(5, {"z": 3}),
                  30: Placement(63, {})}
    return trace, LaneLayout(placements=placements, lane_names={(0, 62): "62 attention"})


def test_odd_events_and_dict_placements(tmp_path, monkeypatch):
    trace, layout = _odd_gpu_trace(tmp_path)
    got = _same_plan(trace, layout, monkeypatch)
    assert got["counters"] and got["flows"] and got["device_of"] and got["stats"]["untimed"] == 1
    assert any(isinstance(v, int) and v >= 1 << 31 for v in got["rewrite"][1].values())  # beyond the int32 column
    assert any(h[0] == "named" for h in got["homes"]) and any(h[0] == "wide_thread" for h in got["homes"])
    _same_plan(trace, None, monkeypatch)


@pytest.mark.parametrize("name", ["seed_block_annotated", "two_branch", "seed_block_graph"])
@pytest.mark.parametrize("lanes", ["none", "all"])
def test_fixtures_joined_and_not(name, lanes, monkeypatch):
    trace = kineto.read_trace(fixture_trace(name))
    _same_plan(trace, None, monkeypatch)
    if name == "seed_block_graph":
        return
    joined = read_and_join(trace, [fixture_capture(name)], graph_lanes=lanes)
    got = _same_plan(trace, joined.layout, monkeypatch)  # placements in a dict
    assert any(v != plan_mod._Lanes._NONE for v in got["rewrite"][0])
    scanned = scan_trace(str(fixture_trace(name)), join=True)
    scanned.source.close()
    layout = read_and_join(scanned, [fixture_capture(name)], graph_lanes=lanes).layout
    assert isinstance(layout.placements, CompactPlacements)
    assert _same_plan(scanned, layout, monkeypatch)["kinds"] == got["kinds"]  # rows read from the join's columns


def test_compact_rows_kept_whole_and_beyond_int32(tmp_path, monkeypatch):
    """A CompactPlacements whose rows were pinned (kept whole) or hold a lane beyond int32."""
    src, ann = _decoder(tmp_path, replays=2, layers=2)
    trace = scan_trace(str(src), join=True)  # two passes: the join's placements in columns
    trace.source.close()
    layout = read_and_join(trace, [ann], graph_lanes="all").layout
    assert isinstance(layout.placements, CompactPlacements)
    rows = list(layout.placements)
    assert len(rows) > 10
    mutable_placement(layout.placements, rows[0]).args["extra"] = 1  # kept whole from here on
    layout.placements.put(rows[1], Placement(1 << 40, {"x": 1}))
    layout.placements.put(rows[2], Placement(3, {}))
    layout.placements.put(rows[3], Placement(None, {"y": 1}))
    got = _same_plan(trace, layout, monkeypatch)
    assert got["rewrite"][1]  # a lane beyond int32, outside the column


@pytest.mark.parametrize("join", [True, False], ids=["join", "plain"])
def test_two_pass_light_events(join, tmp_path, monkeypatch):
    """The first pass's light events (shared args, interned fields), with and without the join."""
    for path, ann in (_odd_trace(tmp_path), _decoder(tmp_path, replays=3, layers=2)):
        scanned = scan_trace(str(path), join=join)
        scanned.source.close()
        layout = read_and_join(scanned, [ann], graph_lanes="all", force=True).layout if join else None
        _same_plan(scanned, layout, monkeypatch)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 25)), max_size=80))
def test_compiled_assign_is_overlap_assign(raw):
    """``_plan.assign_sorted`` (a home's sorted spans read from their int64 array) against
    ``overlap.assign``: the same tracks, uuids asked in the same order, the same records; nested,
    overlapping (spills), equal starts and zero durations included."""
    flat = array("q")
    for i, (ts, dur) in enumerate(raw):
        flat.extend((ts, -dur, 3 * i))
    asked = {"c": [], "python": []}

    def uuid(name):
        return lambda t: asked[name].append(t) or 100 + t
    got = plan_mod._compiled_assign(plan_mod._sorted_array(flat), uuid("c"), overlap.TrackRecords)
    want = overlap.assign(plan_mod._sorted_spans(flat), uuid("python"))
    assert asked["c"] == asked["python"]
    assert [(t.uuid, t.ts.tolist(), t.codes.tolist()) for t in got] == \
        [(t.uuid, t.ts.tolist(), t.codes.tolist()) for t in want]


def _flow_trace(tmp_path):
    """Flow events of every kind the binding meets: a launch to kernels, a flow end at a time where
    two slices of its thread start (the one with its correlation wins), one where none of its
    thread does, a second category (its ids keyed apart), an end without a start, a start on a
    slice that is also a target (no self flow), a flow event without ts, a ``t`` step."""
    cpu = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 12, "dur": 3.0}
    k = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "dur": 1.0}
    evs = [
        dict(cpu, ts=1.0, args={"correlation": 1}),
        dict(k, ts=5.0, args={"device": 0, "stream": 7, "correlation": 1}),
        dict(k, ts=6.0, args={"device": 0, "stream": 7, "correlation": 1}),
        dict(k, ts=7.0, args={"device": 0, "stream": 7, "correlation": 2}),  # two start at 7.0 on stream 7
        dict(k, ts=7.0, args={"device": 0, "stream": 7, "correlation": 3}),
        dict(k, ts=7.0, tid=8, args={"device": 0, "stream": 8, "correlation": 3}),  # another thread, same time
        dict(cpu, ts=2.0, tid=13, args={"correlation": 3}),
        dict(cpu, ts=2.0, tid=13, dur=1.0, args={"correlation": 4}),  # nested, same start
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "pid": 11, "tid": 12, "ts": 1.0, "id": 1},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 5.0, "id": 1, "bp": "e"},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 6.0, "id": 1, "bp": "e"},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "pid": 11, "tid": 13, "ts": 2.0, "id": 3},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 7.0, "id": 3, "bp": "e"},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 9, "ts": 7.0, "id": 3, "bp": "e"},  # no slice
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 8.5, "id": 3, "bp": "e"},  # none then
        {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "pid": 11, "tid": 12, "ts": 1.0, "id": 1},
        {"ph": "f", "cat": "fwdbwd", "name": "fwdbwd", "pid": 11, "tid": 13, "ts": 2.0, "id": 1, "bp": "e"},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 6.0, "id": 99, "bp": "e"},  # no start
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 5.0, "id": 5},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 5.0, "id": 5, "bp": "e"},  # itself
        {"ph": "t", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 6.0, "id": 1},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "id": 1, "bp": "e"},  # no ts
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 8, "ts": 5.0, "id": 1, "bp": "e"},  # one slice
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 7, "ts": 6.0, "id": 1, "bp": "e"},  # starts then,
    ]  # on other threads
    src = tmp_path / "flows.json"
    src.write_text(json.dumps({"traceEvents": evs}))
    return kineto.read_trace(str(src))


@pytest.mark.parametrize("case", ["odd flows", "seed_block_graph", "decoder"])
@pytest.mark.parametrize("size", [False, True])
def test_compiled_flow_binding_is_the_python_loop(case, size, tmp_path, monkeypatch):
    """``flows.BIND_FLOW_EVENTS`` (``_plan.bind_flow_events``) against ``plan_flows``' Python loop:
    the same flows out of each source, the same ends, counts of flows, unbound events and ends
    without a start."""
    from perfetto_graph_ann.write.perfetto import flows as flows_mod

    if flows_mod.BIND_FLOW_EVENTS is None:
        pytest.skip("the writer's compiled loops (_plan) are not built or turned off")
    if case == "odd flows":
        trace = _flow_trace(tmp_path)
    elif case == "decoder":
        trace = kineto.read_trace(str(_decoder(tmp_path, replays=2, layers=2)[0]))
    else:
        trace = kineto.read_trace(fixture_trace(case))
    plan = plan_mod.plan_events(trace, None, TrackTable(trace), WriteStats())
    got = {}
    for name, fn in (("c", flows_mod.BIND_FLOW_EVENTS), ("python", None)):
        calls = []
        monkeypatch.setattr(flows_mod, "BIND_FLOW_EVENTS", fn and (lambda *a: calls.append(1) or fn(*a)))
        fp = flows_mod.plan_flows(plan.events, plan.flow_indices, plan.starts, size=plan.base if size else 0)
        ends = {i: tuple(fp.terminating[i]) for i in range(plan.base) if i in fp.terminating}
        got[name] = ({k: v.tolist() for k, v in fp.outgoing.items()}, ends, fp.count, fp.unbound, fp.without_start)
        assert bool(calls) == (fn is not None)
    assert got["c"] == got["python"] and got["c"][2]
    if case == "odd flows":
        assert got["c"][3] == 4 and got["c"][4] == 1  # unbound: tid 9, 8.5, tid 8, pid 1; without start: id 99


@settings(max_examples=100, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from([plan_mod.BEGIN, plan_mod.END, plan_mod.COUNTER]), st.integers(0, 40)),
                max_size=60), st.integers(1, 9), st.integers(0, 41))
def test_records_begun_are_the_begin_keys_below_base_of_each_chunk(records, size, base):
    """``Records.begun`` (the input events a two-pass batch reads again) against the filter over
    each chunk's lists that the packet loop had: the same keys, in order, chunk by chunk."""
    import numpy as np

    kinds = np.array([k for k, _ in records], np.int64)
    keys = np.array([i for _, i in records], np.int64)
    recs = plan_mod.Records(np.arange(len(records), dtype=np.int64), kinds, keys, np.zeros(len(records), np.int64), [])
    want = [[i for kind, i in zip(c[1], c[2]) if kind == plan_mod.BEGIN and i < base] for c in recs.chunks(size)]
    assert list(recs.begun(size, base)) == want


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(st.one_of(st.integers(0, 5), st.tuples(st.just("fwdbwd"), st.integers(0, 3))),
                          st.lists(st.integers(-2, 12), max_size=5)), max_size=8, unique_by=lambda kt: kt[0]),
       st.dictionaries(st.one_of(st.integers(0, 5), st.tuples(st.just("fwdbwd"), st.integers(0, 3))),
                       st.integers(-1, 11), max_size=8),
       st.integers(0, 10), st.integers(2, 12), st.dictionaries(st.integers(0, 9), st.integers(1, 4), max_size=3))
def test_compiled_flow_numbering_is_the_python_loop(targets, sources, size, one_max, held):
    """``flows.NUMBER_FLOWS`` (``_plan.number_flows``) against ``plan_flows``' numbering loop: the
    same ids out of each source (a slice's flow to itself left out, a source left without any
    dropped), the same ends in the FlowEnds column and beyond it (a second end of one target,
    targets outside the column, ids from ``one_max`` up, ends held before), the same counts."""
    from perfetto_graph_ann.write.perfetto import flows as flows_mod

    if flows_mod.NUMBER_FLOWS is None:
        pytest.skip("the writer's compiled loops (_plan) are not built or turned off")
    got = {}
    saved_max, saved = flows_mod._ONE_MAX, flows_mod.NUMBER_FLOWS
    for name, fn in (("c", saved), ("python", None)):
        plan = flows_mod.FlowPlan(terminating=flows_mod.FlowEnds(size))
        for t, ids in held.items():  # ends held before: in the column, or beyond it
            plan.terminating[t] = (ids,) if t % 2 else (ids, ids + 1)
        flows_mod._ONE_MAX, flows_mod.NUMBER_FLOWS = one_max, fn
        try:
            flows_mod._number(plan, dict(sources), {k: list(v) for k, v in targets})
        finally:
            flows_mod._ONE_MAX, flows_mod.NUMBER_FLOWS = saved_max, saved
        term = plan.terminating
        got[name] = ({k: v.tolist() for k, v in plan.outgoing.items()}, term.one.tolist(), dict(term.more), plan.count,
                     plan.without_start, list(plan.outgoing))
    assert got["c"] == got["python"]
