"""The join on the real H200 recordings, against expectations computed from the JSON."""
from __future__ import annotations

import dataclasses
import gzip
import json
from collections import Counter

import pytest

from support.join_expect import COLLECTIVE_FIELDS, allreduce_annotations, calibrated_expectation, fixture_capture, fixture_trace, kernels, load_capture, load_json, strip_calibration
from perfetto_graph_ann.annotations.model import AnnotationSet, GraphRecord, NodeRecord
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.join import join
from perfetto_graph_ann.join.lanes import lane_name
from perfetto_graph_ann.read.kineto import read_trace


@pytest.fixture(scope="module")
def seed():
    return read_trace(fixture_trace("seed_block_annotated")), read_capture_record(fixture_capture("seed_block_annotated"))


@pytest.fixture(scope="module")
def two_branch():
    return read_trace(fixture_trace("two_branch")), read_capture_record(fixture_capture("two_branch"))


def test_seed_block_lane_counts_all(seed):
    trace, ann = seed
    layout = join(trace, ann, "all")
    counts = Counter(p.lane for p in layout.placements.values())
    assert counts == {7: 10, 61: 20, 62: 40}  # issue 5 acceptance numbers
    assert layout.report.matched == {"exact": 0, "calibrated": 70, "structural": 0}
    assert layout.report.unmatched == 0 and layout.report.ambiguous == 0
    assert layout.report.total == layout.report.graphed == 70
    assert layout.lane_names == {(0, 7): "stream 7", (0, 61): "61 mlp", (0, 62): "62 attention"}


def test_seed_block_every_kernel_carries_its_annotation(seed):
    trace, ann = seed
    expect = calibrated_expectation("seed_block_annotated")
    layout = join(trace, ann, "all")
    assert set(layout.placements) == set(expect)
    for idx, exp in expect.items():
        p = layout.placements[idx]
        assert p.lane == exp["lane"]
        assert p.args["name"] == exp["scope"]
        assert p.args["graph node id"] == exp["key"]
        assert p.args["graph id"] == exp["graph"]
        assert p.args["replay"] == exp["replay"]
        assert p.args["join"] == "calibrated"
        assert p.args["original_stream"] == exp["stream"]
        assert "stream" not in p.args and "annotated_stream" not in p.args and "join_ambiguous" not in p.args


def test_graph_lanes_none_keeps_streams(two_branch):
    trace, ann = two_branch
    expect = calibrated_expectation("two_branch")
    layout = join(trace, ann, "none")
    assert layout.lane_names == {}
    for idx, exp in expect.items():
        p = layout.placements[idx]
        assert p.lane == exp["stream"]
        assert p.args["annotated_stream"] == exp["lane"]
        assert "original_stream" not in p.args


def test_two_branch_calibrated_puts_each_gemm_on_its_lane(two_branch):
    trace, ann = two_branch
    expect = calibrated_expectation("two_branch")
    layout = join(trace, ann, "all")
    gemm = [i for i, e in kernels(load_json("two_branch")) if "gemm" in e["name"]]
    assert len(gemm) == 10
    lanes = {expect[i]["lane"] for i in gemm}
    assert lanes == {60, 61}  # the two identical GEMMs belong to two different lanes
    for i in gemm:
        assert layout.placements[i].lane == expect[i]["lane"]
        assert layout.placements[i].args["name"] == expect[i]["scope"]
        assert "join_ambiguous" not in layout.placements[i].args
    assert layout.lane_names[(0, 60)] == "60 left_projection"
    assert layout.lane_names[(0, 61)] == "61 right_projection"


def test_two_branch_structural_flags_identical_gemms(two_branch):
    trace, ann = two_branch
    layout = join(trace, strip_calibration(ann), "all")
    doc = load_json("two_branch")
    gemm = {i for i, e in kernels(doc) if "gemm" in e["name"]}
    others = {i for i, _ in kernels(doc)} - gemm
    assert layout.report.matched["structural"] == 15
    assert layout.report.ambiguous == len(gemm) == 10
    for i in gemm:
        assert layout.placements[i].args["join_ambiguous"] is True
        assert layout.placements[i].args["join"] == "structural"
    for i in others:  # the add is unique: matched, not ambiguous, on the default lane
        assert "join_ambiguous" not in layout.placements[i].args
        assert layout.placements[i].args["name"] == "combine"
        assert layout.placements[i].lane == 7


def test_structural_seed_block_lanes_still_right(seed):
    """Ambiguity on the seed block is only between nodes of the same scope: lanes stay right."""
    trace, ann = seed
    expect = calibrated_expectation("seed_block_annotated")
    layout = join(trace, strip_calibration(ann), "all")
    assert layout.report.matched["structural"] == 70
    for idx, exp in expect.items():
        assert layout.placements[idx].lane == exp["lane"]
        assert layout.placements[idx].args["name"] == exp["scope"]
        if "join_ambiguous" not in layout.placements[idx].args:
            assert layout.placements[idx].args["graph node id"] == exp["key"]


def test_exact_join_by_graph_node_id(seed):
    """A trace with newer Kineto's node ids joins exactly, even without calibration."""
    trace, ann = seed
    expect = calibrated_expectation("seed_block_annotated")
    events = []
    for e in trace.events:
        if e.index in expect:
            args = dict(e.args, **{"graph id": expect[e.index]["graph"], "graph node id": expect[e.index]["key"]})
            e = e.replace(args=args)
        events.append(e)
    newer = dataclasses.replace(trace, events=events)
    layout = join(newer, strip_calibration(ann), "all")
    assert layout.report.matched == {"exact": 70, "calibrated": 0, "structural": 0}
    for idx, exp in expect.items():
        assert layout.placements[idx].lane == exp["lane"]
        assert layout.placements[idx].args["graph node id"] == exp["key"]
        assert layout.placements[idx].args["join"] == "exact"


def test_exact_join_reads_signed_graph_node_ids(tmp_path, seed):
    """Kineto writes ``graph node id`` as a signed 64-bit integer: a graph whose exec id has
    the top bit set has negative ids in the JSON, and they still name its nodes."""
    _, ann = seed
    doc, cap = load_json("seed_block_annotated"), load_capture("seed_block_annotated")
    expect = calibrated_expectation("seed_block_annotated")
    high = (1 << 31) | cap["exec_cupti_graph_id"]  # keys from 2**63: negative as int64
    local = {x["key"]: x["key"] & 0xFFFFFFFF for x in expect.values()}
    for idx, x in expect.items():
        unsigned = (high << 32) | local[x["key"]]
        assert unsigned >= 1 << 63
        doc["traceEvents"][idx]["args"].update({"graph id": high, "graph node id": unsigned - (1 << 64)})
    path = tmp_path / "signed.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    graphs = tuple(dataclasses.replace(g, exec_id=high, nodes=tuple(
        dataclasses.replace(n, key=(high << 32) | (n.key & 0xFFFFFFFF)) for n in g.nodes)) for g in ann.graphs)
    layout = join(read_trace(path), strip_calibration(dataclasses.replace(ann, graphs=graphs)), "all")
    assert layout.report.matched == {"exact": len(expect), "calibrated": 0, "structural": 0}
    for idx, x in expect.items():
        p = layout.placements[idx]
        assert p.args["graph node id"] == (high << 32) | local[x["key"]]
        assert (p.lane, p.args["name"], p.args["join"]) == (x["lane"], x["scope"], "exact")


def test_lane_is_named_after_its_first_named_node(seed):
    """docs/design.md, Lanes: a lane without a label takes the name of its first node (capture
    order) on that lane. Every node of lane 62 gets its own name here."""
    trace, ann = seed
    cap = load_capture("seed_block_annotated")
    on62 = [n["cupti_node_id"] & 0xFFFFFFFF for n in cap["nodes"] if n["lane"] == 62]  # capture order
    assert len(on62) > 1
    (g,) = ann.graphs
    renamed = tuple(dataclasses.replace(n, annotation={**n.annotation, "name": f"step{n.local_id}"})
                    if n.lane == 62 else n for n in g.nodes)
    layout = join(trace, dataclasses.replace(ann, graphs=(dataclasses.replace(g, nodes=renamed),)), "all")
    assert layout.lane_names[(0, 62)] == f"62 step{on62[0]}"
    assert layout.lane_names[(0, 61)] == "61 mlp"


@pytest.mark.parametrize("count", [1, 3, 4, 6])
def test_shared_lane_shows_three_names_then_how_many_more(seed, count):
    """docs/design.md, Shared lane: distinct names in graph order, at most 3, then "(+k more)"."""
    _, ann = seed
    (g,) = ann.graphs
    graphs = []
    for k in range(count):  # copies of the seed graph, each calling lane 61 differently
        exec_id = g.exec_id + k
        graphs.append(dataclasses.replace(g, exec_id=exec_id, nodes=tuple(
            dataclasses.replace(n, key=(exec_id << 32) | n.local_id,
                                annotation={**n.annotation, "name": f"mlp{k}"} if n.lane == 61 else n.annotation)
            for n in g.nodes)))
    names = [f"mlp{k}" for k in range(count)]
    expected = "61 " + " / ".join(names[:3]) + (f" (+{count - 3} more)" if count > 3 else "")
    # named from every graph of the set (in one trace, only the graphs with work on the lane)
    assert lane_name(61, dataclasses.replace(ann, graphs=tuple(graphs))) == expected
    assert lane_name(61, dataclasses.replace(ann, graphs=tuple(graphs)), {graphs[-1].exec_id}) == f"61 {names[-1]}"


def test_several_graphs_each_replay_finds_its_own(seed, two_branch):
    both = AnnotationSet.merge([seed[1], two_branch[1]])
    for (trace, ann), name in ((seed, "seed_block_annotated"), (two_branch, "two_branch")):
        exec_id = load_capture(name)["exec_cupti_graph_id"]
        for a in (both, strip_calibration(both)):
            layout = join(trace, a, "all")
            assert layout.report.unmatched == 0
            assert {p.args["graph id"] for p in layout.placements.values()} == {exec_id}


def test_unmatched_graphed_events_go_to_default_lane(two_branch):
    trace, _ = two_branch
    other = GraphRecord(999, (NodeRecord(key=999 << 32, type="host", annotation={"name": "elsewhere"}),))
    # annotations with graphs that match no replay are refused unless forced (test_join_refusal.py)
    layout = join(trace, AnnotationSet(graphs=(other,)), "all", force=True)
    assert layout.report.no_match_overridden
    assert layout.report.unmatched == layout.report.graphed == 15
    assert {p.lane for p in layout.placements.values()} == {7}
    assert all(set(p.args) == {"original_stream"} for p in layout.placements.values())


def test_eager_trace_has_no_placements():
    trace = read_trace(fixture_trace("seed_block_eager"))
    layout = join(trace, read_capture_record(fixture_capture("seed_block_annotated")), "all")
    assert layout.placements == {} and layout.report.graphed == 0
    assert layout.report.total == len(kernels(load_json("seed_block_eager")))


@pytest.mark.parametrize("default_stream", [7, 3])
def test_all_without_annotated_nodes_raises_as_torch_does(two_branch, default_stream):
    """torch 2.15 refuses graph_lanes="all" without annotations; nodes without fields count as none."""
    trace, ann = two_branch
    bare = dataclasses.replace(ann, graphs=tuple(dataclasses.replace(g, nodes=tuple(
        dataclasses.replace(n, annotation={}) for n in g.nodes)) for g in ann.graphs))
    for empty in (AnnotationSet(), bare):
        with pytest.raises(ValueError, match="graph_lanes='all' needs annotations"):
            join(trace, empty, "all", default_stream=default_stream)
        assert join(trace, empty).graph_lanes == "none"  # torch's default


def test_default_stream_is_the_lane_of_unlaned_events(two_branch):
    trace, ann = two_branch
    layout = join(trace, ann, "all", default_stream=5)
    expect = calibrated_expectation("two_branch")
    assert {i: p.lane for i, p in layout.placements.items()} == {i: 5 if x["lane"] == 7 else x["lane"]
                                                                  for i, x in expect.items()}


def test_bad_graph_lanes():
    with pytest.raises(ValueError):
        join(read_trace(fixture_trace("two_branch")), AnnotationSet(), "some")


def test_allreduce_graph_restores_eager_collective_fields():
    trace = read_trace(fixture_trace("allreduce_graph_rank0"))
    eager = load_json("allreduce_eager_rank0")
    eager_nccl = [e for _, e in kernels(eager) if e["name"].startswith("ncclDevKernel")]
    ref = {k: eager_nccl[0]["args"][k] for k in COLLECTIVE_FIELDS}
    layout = join(trace, allreduce_annotations(), "all")
    graph_doc = load_json("allreduce_graph_rank0")
    nccl_idx = [i for i, e in kernels(graph_doc) if e["name"].startswith("ncclDevKernel")]
    assert len(nccl_idx) == 5
    for i in nccl_idx:
        p = layout.placements[i]
        assert p.lane == 60 and p.args["join"] == "structural" and "join_ambiguous" not in p.args
        got = {k: p.args[k] for k in COLLECTIVE_FIELDS}
        assert got == ref
        assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in ref.items()}
    assert layout.lane_names[(0, 60)] == "60 default_pg (all_reduce)"
    assert sorted(p.args["replay"] for i, p in layout.placements.items() if i in nccl_idx) == [0, 1, 2, 3, 4]


def test_cut_replay_stays_unlabelled(seed):
    """A replay missing its first kernel (profiling window cut) must not shift calibrated ordinals,
    and, matching the graph only in part, gets no structural labels either: it is left unlabelled
    and counted with its reason."""
    from perfetto_graph_ann.join.structural import REASON_COUNT

    trace, ann = seed
    expect = calibrated_expectation("seed_block_annotated")
    first_replay = sorted(i for i, x in expect.items() if x["replay"] == 0)
    dropped = first_replay[0]  # the qkv GEMM of replay 0
    cut = dataclasses.replace(trace, events=[e for e in trace.events if e.index != dropped])
    layout = join(cut, ann, "all")
    rest = [i for i in first_replay if i != dropped]
    for i in rest:
        p = layout.placements[i]
        assert "join" not in p.args and "name" not in p.args and p.lane == 7  # the default lane, no label
    for i, x in expect.items():
        if x["replay"] != 0:
            assert layout.placements[i].args["join"] == "calibrated" and layout.placements[i].lane == x["lane"]
    assert layout.report.matched == {"exact": 0, "calibrated": 70 - len(first_replay), "structural": 0}
    assert layout.report.unmatched == len(rest)
    assert layout.report.unmatched_replays == {REASON_COUNT: 1}
    assert layout.report.unmatched_replay_events == {REASON_COUNT: len(rest)}
