"""Lane labels belong to the graph that set them, not to the process (H200 bug, tests/test_demo.py -m gpu).

One process captures the two-branch graph (``mark_stream`` hands out lanes 60
"left_projection" and 61 "right_projection"), then the seed block, whose
``mark_kernels({"name": "mlp", "stream": 61})`` reuses lane id 61 explicitly. Both captures
run through the real session / ``mark_stream`` / ``mark_kernels`` code on the fake CUDA
backend (a few-line fake ``torch`` module serves ``mark_stream``'s stream switch); node
tables, exec ids and calibration are the shipped capture records', so the shipped H200
traces join against the resulting registry snapshot. Expected names come from the capture
JSON (scope names and lanes), not from the code under test.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import types

import pytest
from support.capture_fakes import FakeCuda

from support.join_expect import as_fixture_process, calibrated_expectation, fixture_capture, fixture_trace, load_capture
from perfetto_graph_ann import mark_kernels
from perfetto_graph_ann.capture import api, backends, marks
from perfetto_graph_ann.capture import collectives as C
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.annotations.model import AnnotationSet
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.capture.registry import Registry
from perfetto_graph_ann.annotations.files import load_annotations, save_annotations
from perfetto_graph_ann.annotations.sidecar_json import from_json, to_json
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace

# every test here runs on the compiled capture path and on the pure-Python one (conftest.py)
pytestmark = pytest.mark.usefixtures("capture_path")

STREAM = 0x70


class FakeStream:
    def __init__(self, handle: int):
        self.cuda_stream = handle


def fake_torch():
    """What mark_stream needs from torch: current_stream() and the stream() context."""
    current = [FakeStream(STREAM)]

    @contextlib.contextmanager
    def stream(s):
        current.append(s)
        try:
            yield s
        finally:
            current.pop()

    cuda = types.SimpleNamespace(current_stream=lambda: current[-1], stream=stream)
    # mark_kernels' backward tagging (on by default) reads grad mode (off: a serving-style
    # capture) and autograd's node counter
    autograd = types.SimpleNamespace(_get_sequence_nr=lambda: 0)
    return types.SimpleNamespace(cuda=cuda, is_grad_enabled=lambda: False, _C=types.SimpleNamespace(_autograd=autograd))


@pytest.fixture
def process(monkeypatch):
    """A fresh 'process': its own registry (lane allocator) and a fake torch for mark_stream."""
    reg = Registry()
    monkeypatch.setattr(api, "REGISTRY", reg)
    monkeypatch.setattr(marks, "REGISTRY", reg)
    monkeypatch.setattr(C, "REGISTRY", reg)
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    as_fixture_process(monkeypatch)  # the fixture traces' pid: the identity check passes
    return reg


def node_local(n: dict) -> int:
    return n["cupti_node_id"] & 0xFFFFFFFF


def calibration(cap: dict):
    return {int(k): (v["stream"], v["ordinal"]) for k, v in cap["calibration"].items()}


@contextlib.contextmanager
def capture(reg: Registry, cap: dict, owner: str):
    """One graph(...) block on a fake driver whose ids give the record's exec graph id."""
    cuda = FakeCuda(first_graph_id=cap["exec_cupti_graph_id"] - 1)  # template id, then exec id
    cuda.begin_capture(STREAM)
    sess = S.CaptureSession(cuda, STREAM, reg, owner=owner, device=0)
    sess.start()
    S.push(sess)
    try:
        with backends.use(cuda):
            yield cuda, sess
        sess.finish_capture()
    finally:
        S.pop(sess)
    sess.bind_exec(cuda.instantiate(cuda.end_capture(STREAM)))
    sess.apply_calibration(calibration(cap))


def launch(cuda, stream: int, n: dict) -> None:
    cuda.launch(stream, n["kernel"], grid=tuple(n["grid"]), block=tuple(n["block"]))


def capture_two_branch(reg: Registry) -> None:
    """The seed's mark_stream example: each GEMM on its own side stream, then the add."""
    cap = load_capture("two_branch")
    with capture(reg, cap, "two_branch") as (cuda, sess):
        for i, n in enumerate(cap["nodes"]):
            assert node_local(n) == i  # the fake driver numbers nodes in launch order
            if isinstance(n["lane"], str):
                side = FakeStream(0x200 + i)
                cuda.join(side.cuda_stream, STREAM)
                with api.mark_stream(side, n["lane"]):
                    launch(cuda, side.cuda_stream, n)
            else:
                with mark_kernels(n["scope"]):
                    launch(cuda, STREAM, n)


def capture_seed_block(reg: Registry) -> None:
    """The seed block: mark_kernels scopes, attention on lane 62, mlp on explicit lane 61."""
    cap = load_capture("seed_block_annotated")
    with capture(reg, cap, "seed_block") as (cuda, sess):
        for i, n in enumerate(cap["nodes"]):
            assert node_local(n) == i
            fields = {"name": n["scope"]} if n["lane"] is None else {"name": n["scope"], "stream": n["lane"]}
            with mark_kernels(fields):
                launch(cuda, STREAM, n)


def expected_names(name: str) -> dict:
    """lane -> name from a capture record alone: mark_stream label, else the first node's scope."""
    cap = load_capture(name)
    labels, names = {}, {}
    for n in cap["nodes"]:
        lane = n["lane"]
        if isinstance(lane, str):
            labels.setdefault(lane, 60 + len(labels))
            names.setdefault(labels[lane], lane)
        elif lane is not None:
            names.setdefault(lane, n["scope"])
    return names


@pytest.fixture
def both(process):
    capture_two_branch(process)
    capture_seed_block(process)
    return process.snapshot()


def lane_counts(layout):
    out = {}
    for p in layout.placements.values():
        out[p.lane] = out.get(p.lane, 0) + 1
    return out


def test_capture_records_labels_per_graph(both):
    a, b = both.graphs
    assert a.exec_id == load_capture("two_branch")["exec_cupti_graph_id"]
    assert b.exec_id == load_capture("seed_block_annotated")["exec_cupti_graph_id"]
    assert dict(a.lanes) == {60: "left_projection", 61: "right_projection"}
    assert dict(b.lanes) == {}  # the seed block labelled no lane: 61 is only an explicit id
    # the process-wide union (what old readers get) still has the allocator's labels
    assert dict(both.lanes) == {60: "left_projection", 61: "right_projection"}
    assert {n.lane for n in b.nodes} == {None, 61, 62}


def test_trace_of_the_seed_block_only_names_lane_61_mlp(both):
    """The H200 bug: the seed block's lane 61 was named after the other graph's mark_stream."""
    trace = read_trace(fixture_trace("seed_block_annotated"))
    layout = join(trace, both, "all")
    expect = calibrated_expectation("seed_block_annotated")
    assert layout.report.matched["calibrated"] == len(expect) and layout.report.unmatched == 0
    assert lane_counts(layout) == {lane: sum(1 for x in expect.values() if x["lane"] == lane)
                                   for lane in {x["lane"] for x in expect.values()}}
    names = expected_names("seed_block_annotated")
    assert names == {62: "attention", 61: "mlp"}
    assert layout.lane_names == {(0, 7): "stream 7", **{(0, lane): f"{lane} {nm}" for lane, nm in names.items()}}


def test_trace_of_the_two_branch_graph_only_keeps_its_labels(both):
    trace = read_trace(fixture_trace("two_branch"))
    layout = join(trace, both, "all")
    names = expected_names("two_branch")
    assert names == {60: "left_projection", 61: "right_projection"}
    assert layout.lane_names == {(0, 7): "stream 7", **{(0, lane): f"{lane} {nm}" for lane, nm in names.items()}}


def combined_trace():
    """The seed block's replays followed by the two-branch graph's, one trace (ids shifted)."""
    seed, tb = read_trace(fixture_trace("seed_block_annotated")), read_trace(fixture_trace("two_branch"))
    shift_ts = max(e.end_ns or e.ts_ns or 0 for e in seed.events) + 10**6 - min(e.ts_ns for e in tb.events if e.ts_ns)
    shift_corr = 1 + max(e.correlation or 0 for e in seed.events)
    events = list(seed.events)
    for e in tb.events:
        args = dict(e.args)
        if e.correlation is not None:
            args["correlation"] = e.correlation + shift_corr
        events.append(e.replace(
            index=len(events), args=args, ts_ns=None if e.ts_ns is None else e.ts_ns + shift_ts,
            id=e.id + shift_corr if isinstance(e.id, int) and not isinstance(e.id, bool) else e.id))
    return dataclasses.replace(seed, events=events), len(seed.events)


def test_lane_shared_by_two_graphs_names_both_in_capture_order(both):
    trace, n_seed = combined_trace()
    layout = join(trace, both, "all")
    assert layout.report.unmatched == 0
    on61 = {layout.placements[i].args["graph id"] for i, p in layout.placements.items() if p.lane == 61}
    assert on61 == {g.exec_id for g in both.graphs}  # both graphs really have work on lane 61
    # two_branch was captured first: its label first, then the seed block's annotation name
    assert layout.lane_names[(0, 61)] == "61 right_projection / mlp"
    assert layout.lane_names[(0, 60)] == "60 left_projection"
    assert layout.lane_names[(0, 62)] == "62 attention"


@pytest.mark.parametrize("suffix", [".pga", ".pga.gz", ".json", ".json.gz"])
def test_sidecar_round_trip_keeps_per_graph_lanes(both, tmp_path, suffix):
    path = tmp_path / f"ann{suffix}"
    save_annotations(path, both)
    back = load_annotations(path)
    assert [None if g.lanes is None else dict(g.lanes) for g in back.graphs] == \
        [{60: "left_projection", 61: "right_projection"}, {}]
    assert dict(back.lanes) == dict(both.lanes)
    layout = join(read_trace(fixture_trace("seed_block_annotated")), back, "all")
    assert layout.lane_names[(0, 61)] == "61 mlp"


def test_json_sidecar_writes_per_graph_lanes(both):
    doc = to_json(both)
    assert [g.get("lanes") for g in doc["graphs"]] == [{"60": "left_projection", "61": "right_projection"}, {}]
    assert doc["lanes"] == {"60": "left_projection", "61": "right_projection"}


def test_json_sidecar_rejects_bad_graph_lanes(both):
    from perfetto_graph_ann.errors import SidecarError

    doc = to_json(both)
    doc["graphs"][0]["lanes"] = {"sixty": "x"}
    with pytest.raises(SidecarError, match=r"^x\.json: graph 0 lanes: bad entry 'sixty'"):
        from_json(doc, "x.json")
    doc["graphs"][0]["lanes"] = ["x"]
    with pytest.raises(SidecarError, match=r"^x\.json: 'graph 0 lanes' must be an object"):
        from_json(doc, "x.json")


def without_graph_lanes(s: AnnotationSet) -> AnnotationSet:
    return dataclasses.replace(s, graphs=tuple(dataclasses.replace(g, lanes=None) for g in s.graphs))


@pytest.mark.parametrize("form", ["binary", "json"])
def test_old_sidecar_without_graph_lanes_loads_and_names_as_before(both, tmp_path, form):
    """A sidecar written before per-graph lanes: no Graph.lanes field / no "lanes" key per graph."""
    old = without_graph_lanes(both)
    path = tmp_path / ("old.pga" if form == "binary" else "old.json")
    save_annotations(path, old)
    if form == "json":
        assert all("lanes" not in g for g in json.loads(path.read_text())["graphs"])
    back = load_annotations(path)
    assert all(g.lanes is None for g in back.graphs)
    assert dict(back.lanes) == {60: "left_projection", 61: "right_projection"}
    # the process-wide labels apply, as they always did for such files
    layout = join(read_trace(fixture_trace("two_branch")), back, "all")
    assert layout.lane_names[(0, 60)] == "60 left_projection" and layout.lane_names[(0, 61)] == "61 right_projection"
    layout = join(read_trace(fixture_trace("seed_block_annotated")), back, "all")
    assert layout.lane_names[(0, 61)] == "61 right_projection"  # the old (wrong) name: nothing to tell it apart
    # an old single-graph sidecar names exactly as before
    single = without_graph_lanes(read_capture_record(fixture_capture("seed_block_annotated")))
    save_annotations(path, single)
    layout = join(read_trace(fixture_trace("seed_block_annotated")), load_annotations(path), "all")
    assert layout.lane_names == {(0, 7): "stream 7", (0, 61): "61 mlp", (0, 62): "62 attention"}


def test_capture_record_labels_are_its_graphs():
    a = read_capture_record(fixture_capture("two_branch"))
    assert dict(a.graphs[0].lanes) == dict(a.lanes) == {60: "left_projection", 61: "right_projection"}
    merged = AnnotationSet.merge([a, read_capture_record(fixture_capture("seed_block_annotated"))])
    layout = join(read_trace(fixture_trace("seed_block_annotated")), merged, "all")
    assert layout.lane_names[(0, 61)] == "61 mlp"


def test_lanes_cli_graph_lanes_none_names_lanes_per_graph(both, tmp_path, capsys):
    path = tmp_path / "both.pga"
    save_annotations(path, both)
    rc = main(["lanes", str(fixture_trace("seed_block_annotated")), "-a", str(path), "--graph-lanes", "none", "--no-sql"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "61 mlp" in out and "right_projection" not in out and "left_projection" not in out


def test_process_group_label_is_the_captures_own(process):
    """Two graphs using the same process group: each keeps the label of its own first collective."""
    pg = C.GroupInfo("0", "default_pg", (0, 1))

    class T:
        dtype = "torch.float32"

        def numel(self):
            return 4

    cap = {"exec_cupti_graph_id": 10, "calibration": {}}
    for op, owner in (("all_reduce", "g1"), ("all_gather_into_tensor", "g2")):
        cap["exec_cupti_graph_id"] += 10
        with capture(process, cap, owner) as (cuda, sess):
            with C.annotate_collective(op, T(), T(), pg):
                cuda.launch(STREAM, f"nccl_{op}")
    g1, g2 = process.snapshot().graphs
    assert dict(g1.lanes) == {60: "default_pg (all_reduce)"}
    assert dict(g2.lanes) == {60: "default_pg (all_gather_into_tensor)"}
    assert process.lanes.snapshot() == {60: "default_pg (all_reduce)"}  # the allocator keeps the first


def test_backward_captured_in_another_graph_keeps_the_forward_label(process):
    """A backward scope carries its forward mark_stream label into the graph it is captured in."""
    from perfetto_graph_ann.capture.autograd import BackwardTagger

    cap = {"exec_cupti_graph_id": 30, "calibration": {}}
    with capture(process, cap, "fwd") as (cuda, sess):
        side = FakeStream(0x300)  # a side stream: mark_stream gives the current one no lane
        cuda.join(side.cuda_stream, STREAM)
        with api.mark_stream(side, "encoder"):
            lane = sess.recorder.open_fields()["stream"]
            tagger = BackwardTagger({"name": "enc", "stream": lane}, lane_label=sess.lane_label(lane))
            cuda.launch(side.cuda_stream, "fwd")
    cap = {"exec_cupti_graph_id": 40, "calibration": {}}
    with capture(process, cap, "bwd") as (cuda, sess):
        hooks = tagger.hooks()
        hooks.pre(None)
        cuda.launch(STREAM, "bwd")
        hooks.post(None, None)
    fwd, bwd = process.snapshot().graphs
    assert dict(fwd.lanes) == dict(bwd.lanes) == {lane: "encoder"}
    assert bwd.nodes[0].annotation == {"name": "enc", "stream": lane, "autograd_phase": "backward"}


def test_merge_keeps_each_old_files_labels_with_its_graphs(both):
    """Merging sidecars: an old file's graphs keep that file's labels, not the later file's."""
    two_branch, seed = (AnnotationSet((g,), both.lanes if g.exec_id == both.graphs[0].exec_id else {})
                        for g in without_graph_lanes(both).graphs)
    assert dict(two_branch.lanes) == {60: "left_projection", 61: "right_projection"} and seed.graphs[0].lanes is None
    seed_trace = read_trace(fixture_trace("seed_block_annotated"))
    for order in ((two_branch, seed), (seed, two_branch)):
        merged = AnnotationSet.merge(order)
        assert dict(merged.lanes) == {60: "left_projection", 61: "right_projection"}
        assert join(seed_trace, merged, "all").lane_names[(0, 61)] == "61 mlp"
    # two old files labelling the same lane differently: each graph keeps its own file's label
    relabelled = AnnotationSet(seed.graphs, {61: "feed_forward"})
    merged = AnnotationSet.merge([relabelled, two_branch])
    assert merged.lanes[61] == "right_projection"  # the union: later file wins
    assert join(seed_trace, merged, "all").lane_names[(0, 61)] == "61 feed_forward"
