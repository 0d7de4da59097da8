"""The join on traces derived from the fixtures: memsets in replays, reordered files, dropped replays."""
from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from support.join_expect import calibrated_expectation, fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.model import AnnotationSet, GraphRecord, NodeRecord
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.read.model import TraceEvent

TRACE = read_trace(fixture_trace("two_branch"))
ANN = read_capture_record(fixture_capture("two_branch"))
EXPECT = calibrated_expectation("two_branch")


def _with_memsets(trace):
    """Each replay gets a 1 us memset on stream 7 just before its first stream-7 kernel."""
    firsts = {}
    for e in trace.events:
        if e.is_gpu_work and e.stream == 7:
            firsts.setdefault(e.correlation, e)
    events = list(trace.events)
    new = {}
    for corr, k in firsts.items():
        idx = len(events)
        events.append(TraceEvent(idx, "X", "gpu_memset", "Memset (Device)", k.pid, 7, k.ts_ns - 2000, 1000,
                                 {"device": 0, "context": 1, "stream": 7, "correlation": corr, "bytes": 4096}))
        new[idx] = corr
    return dataclasses.replace(trace, events=events), new


def _ann_with_memset(calibrate_memset: bool):
    g = ANN.graphs[0]
    nodes = []
    for n in g.nodes:
        if calibrate_memset and n.stream == 7:
            n = dataclasses.replace(n, ordinal=n.ordinal + 1)  # the memset runs first on stream 7
        nodes.append(n)
    memset = NodeRecord(key=(g.exec_id << 32) | 3, type="memset", annotation={"name": "zero", "stream": 63},
                        stream=7 if calibrate_memset else None, ordinal=0 if calibrate_memset else None)
    return dataclasses.replace(ANN, graphs=(GraphRecord(g.exec_id, tuple(nodes) + (memset,)),))


def test_memset_with_kernel_only_calibration():
    trace, memsets = _with_memsets(TRACE)
    layout = join(trace, _ann_with_memset(False), "all")
    for idx, x in EXPECT.items():  # kernels: calibrated by kernel-only ordinals, unaffected by the memset
        assert layout.placements[idx].lane == x["lane"] and layout.placements[idx].args["join"] == "calibrated"
    for idx in memsets:
        p = layout.placements[idx]
        assert p.lane == 63 and p.args["join"] == "structural" and p.args["name"] == "zero"
    assert layout.report.matched == {"exact": 0, "calibrated": 15, "structural": 5}


def test_memset_calibrated_too():
    trace, memsets = _with_memsets(TRACE)
    layout = join(trace, _ann_with_memset(True), "all")
    assert layout.report.matched == {"exact": 0, "calibrated": 20, "structural": 0}
    for idx in memsets:
        assert layout.placements[idx].lane == 63
    for idx, x in EXPECT.items():
        assert layout.placements[idx].lane == x["lane"]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), keep=st.sets(st.integers(0, 4), min_size=1))
def test_file_order_and_missing_replays_do_not_matter(seed, keep):
    """Shuffle the file's events and drop whole replays: every kept kernel keeps its node and lane,
    and replay indices are renumbered 0.. in launch order."""
    events = [e for e in TRACE.events if e.index not in EXPECT or EXPECT[e.index]["replay"] in keep]
    random.Random(seed).shuffle(events)
    layout = join(dataclasses.replace(TRACE, events=events), ANN, "all")
    kept = {i: x for i, x in EXPECT.items() if x["replay"] in keep}
    assert set(layout.placements) == set(kept)
    renumber = {r: k for k, r in enumerate(sorted(keep))}
    for idx, x in kept.items():
        p = layout.placements[idx]
        assert (p.lane, p.args["graph node id"], p.args["replay"]) == (x["lane"], x["key"], renumber[x["replay"]])


def test_two_graphs_with_identical_calibration_are_ambiguous():
    g = ANN.graphs[0]
    twin = GraphRecord(g.exec_id + 1, tuple(dataclasses.replace(n, key=((g.exec_id + 1) << 32) | n.local_id) for n in g.nodes))
    layout = join(TRACE, AnnotationSet(graphs=(g, twin), lanes=ANN.lanes), "all")
    assert layout.report.ambiguous == layout.report.graphed == 15
    assert all(p.args["join_ambiguous"] is True for p in layout.placements.values())
