"""What the join derives from a graph record alone is built once per record
(:meth:`GraphRecord.derived`), so a process exporting every profiling cycle does not build it
again each cycle, and a later join against the same records writes what a fresh one writes."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perfetto_graph_ann import load_annotations
from perfetto_graph_ann.annotations import model
from perfetto_graph_ann.annotations.model import GraphEdge, GraphRecord, NodeRecord
from perfetto_graph_ann.join import calibrated, critical_path, join, match, projection
from perfetto_graph_ann.pipeline.convert import convert
from perfetto_graph_ann.read.kineto import read_trace

from conftest import FIXTURES


def _record() -> GraphRecord:
    return GraphRecord(3, (NodeRecord(key=(3 << 32) | 0, annotation={"name": "a"}),), name="g")


def test_derived_builds_once_per_record_and_build():
    calls = []

    def count(g):
        calls.append(g.exec_id)
        return [g.exec_id]

    def other(g):
        return "other"

    g = _record()
    first = g.derived(count)
    assert g.derived(count) is first and calls == [3]
    assert g.derived(other) == "other" and g.derived(count) is first
    twin = dataclasses.replace(g)  # a new record: derives again, compares and prints as before
    assert twin == g and repr(twin) == repr(g) and "_derived" not in repr(g)
    assert twin.derived(count) == first and twin.derived(count) is not first and calls == [3, 3]


def test_derived_keeps_no_failure():
    tries = []

    def flaky(g):
        tries.append(1)
        if len(tries) == 1:
            raise ValueError("first try")
        return "built"

    g = _record()
    with pytest.raises(ValueError):
        g.derived(flaky)
    assert g.derived(flaky) == "built" and g.derived(flaky) == "built" and len(tries) == 2


def _inputs():
    """(trace, annotations) of two H200 fixtures: the annotated block (calibrated, scoped) and
    the two-branch graph with its true edges (its critical path on them)."""
    block = load_annotations(FIXTURES / "seed_block_annotated.capture.json")
    branch = load_annotations(FIXTURES / "two_branch.capture.json")
    branch = dataclasses.replace(branch, graphs=(dataclasses.replace(branch.graphs[0], edges=(GraphEdge(0, 2),
                                                                                               GraphEdge(1, 2))),))
    return [("seed_block_annotated", block), ("two_branch", branch)]


def _write(trace_name: str, ann, out: Path) -> bytes:
    trace = read_trace(FIXTURES / f"{trace_name}.trace.json.gz")
    convert(trace, out, layout=join(trace, ann, graph_lanes="all"))
    return out.read_bytes()


def test_a_later_join_builds_nothing_again_and_writes_the_same(tmp_path: Path, monkeypatch):
    builds = {}
    for mod, name in [(critical_path, "work_predecessors"), (projection, "_graph_info"),
                      (match, "_loose_node_counts"), (calibrated, "_build_table"), (model, "_nodes_by_key")]:
        def counted(g, _f=getattr(mod, name), _name=name):
            builds[(_name, g.exec_id)] = builds.get((_name, g.exec_id), 0) + 1
            return _f(g)
        monkeypatch.setattr(mod, name, counted)
    for trace_name, ann in _inputs():
        first = _write(trace_name, ann, tmp_path / f"{trace_name}.1.pftrace")
        built = dict(builds)
        again = _write(trace_name, ann, tmp_path / f"{trace_name}.2.pftrace")
        assert builds == built, f"{trace_name}: the second join built again what the first had"
        fresh = _write(trace_name, _inputs_by_name()[trace_name], tmp_path / f"{trace_name}.3.pftrace")
        assert again == first == fresh
    # every derivation ran, once per graph it was asked for; every node by key never (no graph node ids)
    assert {k[0] for k in builds} == {"work_predecessors", "_graph_info", "_loose_node_counts", "_build_table"}
    assert set(builds.values()) == {2}  # once for the shared records, once for the fresh ones


def _inputs_by_name():
    return dict(_inputs())


def test_graphs_prepared_ahead_leave_the_join_nothing_to_build_and_write_the_same(tmp_path: Path, monkeypatch):
    """What a conversion worker builds while torch still writes (``join.ahead.prepare_graphs``)."""
    from perfetto_graph_ann.annotations.model import ReplayThread, ReplayWindow
    from perfetto_graph_ann.join.ahead import prepare_graphs

    builds = []
    for mod, name in [(critical_path, "work_predecessors"), (projection, "_graph_info"),
                      (match, "_loose_node_counts"), (calibrated, "_build_table")]:
        def counted(g, _f=getattr(mod, name), _name=name):
            builds.append((_name, g.exec_id))
            return _f(g)
        monkeypatch.setattr(mod, name, counted)
    for trace_name, ann in _inputs():
        fresh = _write(trace_name, _inputs_by_name()[trace_name], tmp_path / f"{trace_name}.fresh.pftrace")
        builds.clear()
        assert prepare_graphs(ann) == 1
        ahead = set(builds)
        want = {"_graph_info", "_loose_node_counts", "_build_table"} | (
            {"work_predecessors"} if ann.graphs[0].edges is not None else set())
        assert {k[0] for k in ahead} == want
        assert _write(trace_name, ann, tmp_path / f"{trace_name}.ahead.pftrace") == fresh
        assert set(builds) == ahead and len(builds) == len(ahead), f"{trace_name}: the join built again"
    # only the graphs the latest window replayed (an earlier window's graph is left alone)
    block = _inputs_by_name()["seed_block_annotated"]
    other = dataclasses.replace(block.graphs[0], exec_id=block.graphs[0].exec_id + 1)
    windows = (ReplayWindow(1, 0, 10, (ReplayThread(1, 1, (other.exec_id,)),)),
               ReplayWindow(1, 20, 30, (ReplayThread(1, 1, (block.graphs[0].exec_id,)),)))
    builds.clear()
    assert prepare_graphs(dataclasses.replace(block, graphs=(block.graphs[0], other), replays=windows)) == 1
    assert {k[1] for k in builds} == {block.graphs[0].exec_id}


def test_the_registry_hands_out_the_record_it_built():
    """What ``pga.export`` joins against each cycle (``recorded_annotations``: the registry's
    snapshot) holds the same record objects, so their derived values carry over."""
    from perfetto_graph_ann.capture.registry import Registry

    reg = Registry()
    built = []
    reg.put("owner", lambda: built.append(1) or _record())
    first, again = reg.snapshot(), reg.snapshot()
    assert first.graphs[0] is again.graphs[0] and built == [1]


def test_a_graphs_sidecar_part_is_serialized_once_and_saves_the_same_bytes(tmp_path: Path, monkeypatch):
    """The worker's sidecar (``background.save_for_worker``) takes each graph's serialized
    message from its record: built once across saves, the file the same bytes as a fresh
    record set's through ``save_annotations``, and read back to the same annotations."""
    from perfetto_graph_ann.annotations import sidecar_proto
    from perfetto_graph_ann.annotations.files import save_annotations
    from perfetto_graph_ann.capture.background import save_for_worker

    built = []
    orig = sidecar_proto._graph_to_proto
    monkeypatch.setattr(sidecar_proto, "_graph_to_proto", lambda g: built.append(g.exec_id) or orig(g))
    for name, ann in _inputs():
        fresh = save_annotations(tmp_path / f"{name}.fresh.pgab", _inputs_by_name()[name], "binary")
        for k in range(2):
            folder = tmp_path / f"{name}{k}"
            folder.mkdir()
            path = save_for_worker(ann, str(folder))
            assert Path(path).read_bytes() == Path(fresh).read_bytes()
        back = load_annotations(path)
        assert back.graphs == ann.graphs and back.replays == ann.replays
    assert sorted(built) == sorted(2 * [g.exec_id for _, a in _inputs() for g in a.graphs])  # fresh and kept sets


def test_nodes_by_key_is_each_graphs_built_once_and_a_later_graph_wins(monkeypatch):
    calls = []
    orig = model._nodes_by_key
    monkeypatch.setattr(model, "_nodes_by_key", lambda g: calls.append(g.exec_id) or orig(g))
    a = _record()
    b = GraphRecord(3, (NodeRecord(key=(3 << 32) | 0, annotation={"name": "b"}),), name="twin")  # the same key
    ann = model.AnnotationSet((a, b), {})
    for _ in range(2):
        got = ann.nodes_by_key()
        assert got == {n.key: n for g in (a, b) for n in g.nodes} and got[(3 << 32)] is b.nodes[0]
    assert calls == [3, 3]  # once per record
    got[1] = None  # the caller's own dict
    assert 1 not in ann.nodes_by_key()
