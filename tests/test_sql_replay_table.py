"""One replay concept, one table: ``graph_ann_replay`` carries the projection's graph name,
candidates and replay slice, and ``graph_ann_graph_replay`` (deprecated) is that table under
its earlier names. Expected values come from the fixture's JSON and capture record."""
from __future__ import annotations

import gzip
import json

import pytest

from conftest import fixture_capture, fixture_trace
from support.engine_support import requires_portable
from perfetto_graph_ann.annotations.files import load_annotations
from perfetto_graph_ann.pipeline.convert import convert_file
from perfetto_graph_ann.query.session import open_trace

NAME = "two_branch"
RENAMED = {"id": "replay_slice_id", "dur": "wall_dur", "kernel_count": "work_count",
           "launch_latency": "launch_to_gpu_dur"}
SAME = ["ts", "group_id", "device", "graph_id", "graph_name", "replay", "graph_candidates", "busy_dur"]


def _launches(path) -> int:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and "GraphLaunch" in e.get("name", ""))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay_table")
    out = {}
    for kind, name in (("pftrace", "t.pftrace"), ("json", "t.json")):
        out[kind] = str(d / name)
        convert_file(str(fixture_trace(NAME)), out[kind], [str(fixture_capture(NAME))])
    return out


def _q(s, sql):
    return s.query("INCLUDE PERFETTO MODULE graph_ann.replays; INCLUDE PERFETTO MODULE graph_ann.scopes; " + sql).df()


@requires_portable
def test_the_replay_table_names_its_graph_and_slice(converted):
    ann = load_annotations(fixture_capture(NAME))
    ids = {g.exec_id for g in ann.graphs}
    with open_trace(converted["pftrace"], engine="portable") as s:
        r = _q(s, "SELECT * FROM graph_ann_replay ORDER BY ts")
        slices = _q(s, "SELECT id, name FROM slice WHERE category = 'graph_replay'")
    assert len(r) == _launches(fixture_trace(NAME)) == len(slices)
    assert set(r["replay_slice_id"]) == set(slices["id"])
    assert set(r["graph_id"]) <= ids and r["graph_candidates"].isna().all()
    names = dict(zip(slices["id"], slices["name"]))
    for row in r.itertuples():
        assert names[row.replay_slice_id] == f"{row.graph_name} #{row.replay}"
        want = next(g.name for g in ann.graphs if g.exec_id == row.graph_id) or f"graph {row.graph_id}"
        assert row.graph_name == want


@requires_portable
def test_without_a_projection_the_new_columns_are_null(converted):
    with open_trace(converted["json"], engine="portable") as s:
        r = _q(s, "SELECT * FROM graph_ann_replay")
        g = _q(s, "SELECT * FROM graph_ann_graph_replay")
    assert len(r) == _launches(fixture_trace(NAME))
    assert r["replay_slice_id"].isna().all() and r["graph_name"].isna().all()
    assert g.empty


@requires_portable
def test_graph_replay_is_the_replay_table_under_its_old_names(converted):
    with open_trace(converted["pftrace"], engine="portable") as s:
        old = _q(s, "SELECT * FROM graph_ann_graph_replay ORDER BY id")
        new = _q(s, "SELECT * FROM graph_ann_replay WHERE replay_slice_id IS NOT NULL ORDER BY replay_slice_id")
    assert len(old) == len(new) > 0
    for o, n in RENAMED.items():
        assert old[o].tolist() == new[n].tolist(), o
    for c in SAME:
        assert old[c].astype(object).where(old[c].notna(), None).tolist() == \
            new[c].astype(object).where(new[c].notna(), None).tolist(), c


@requires_portable
def test_the_writers_busy_time_is_the_sqls(converted):
    """Busy time is written on each replay slice by the converter (``debug.busy ns``, for the
    UI) and computed by the SQL (``graph_ann_replay.busy_dur``, also for Chrome JSON): the two
    must agree wherever both exist, as must the kernel counts and launch latencies."""
    with open_trace(converted["pftrace"], engine="portable") as s:
        both = _q(s, "SELECT s.busy_dur AS written, r.busy_dur AS computed, s.kernel_count, r.work_count, "
                     "s.launch_latency, r.launch_to_gpu_dur, s.dur, r.wall_dur "
                     "FROM _graph_ann_replay_slice AS s JOIN graph_ann_replay AS r USING (launch_id)")
    assert len(both) == _launches(fixture_trace(NAME))
    assert both["written"].tolist() == both["computed"].tolist()
    assert both["kernel_count"].tolist() == both["work_count"].tolist()
    assert both["launch_latency"].tolist() == both["launch_to_gpu_dur"].tolist()
    assert both["dur"].tolist() == both["wall_dur"].tolist()
