"""Rekeying and calibration on CPU, checked against the H200 recordings."""
from __future__ import annotations

import collections
import contextlib
import json
import types

import pytest

from perfetto_graph_ann.annotations.model import make_key, split_key
from perfetto_graph_ann.capture.backends import node_type_name
from perfetto_graph_ann.capture.calibration import CalibrationDeferred, calibrate_replay, records_from_activities
from perfetto_graph_ann.capture.resolve import ActivityRecord, NodeInfo, calibration_table, resolve_graph
from perfetto_graph_ann.capture.scopes import ScopeRecord, merge_scopes
from perfetto_graph_ann.errors import CaptureError

from perfetto_graph_ann._resources import demo_data_dir

FIXTURES = demo_data_dir()


def key_check():
    return json.loads((FIXTURES / "cupti_key_check.json").read_text())


@pytest.mark.parametrize("name,expected", [("transformer", {"qkv_proj": 1, "attention": 8, "out_proj": 1, "mlp": 4}),
                                           ("multistream", {"left_projection": 1, "right_projection": 1, "combine": 1})])
def test_resolve_real_capture_tables(name, expected):
    """The probe's node table + scopes (by handle) -> our ranges -> keys CUPTI reported at replay.

    The probe recorded each scope's handles; in the table's (listing) order every scope's
    handles are one contiguous run, which is what the count-based recorder stores.
    """
    d = key_check()[name]
    table = d["table"]
    infos = [NodeInfo(n["handle"], n["cupti_node_id"] & 0xFFFFFFFF, node_type_name(n["type"]), n.get("kernel"),
                      tuple(n["grid"]) if n.get("grid") else None, tuple(n["block"]) if n.get("block") else None)
             for n in table["nodes"]]
    listing = [n.handle for n in infos]
    records = []
    for seq, (scope, lane, handles) in enumerate(d["scopes"]):
        fields = {"name": scope}
        if isinstance(lane, int):
            fields["stream"] = lane
        pos = sorted(listing.index(h) for h in handles)
        assert pos == list(range(pos[0], pos[-1] + 1)), f"{scope}: handles not contiguous in listing order"
        records.append(ScopeRecord(seq, fields, pos[0], pos[-1] + 1))
    ann = merge_scopes(records, listing)
    rec = resolve_graph(infos, ann, d["exec_id"], template_id=split_key(table["nodes"][0]["cupti_node_id"])[0])
    assert collections.Counter(n.annotation["name"] for n in rec.nodes) == expected
    # the replayed kernels' graph_node_id (from CUPTI activity records) are our keys, same kernel
    by_key = {n.key: n for n in rec.nodes}
    for s in d["sample"]:
        assert by_key[s["graph_node_id"]].kernel == s["name"]
    assert all(split_key(n.key)[0] == d["exec_id"] for n in rec.nodes)


def test_calibration_table_ordinals_per_stream():
    ex = 5
    recs = [
        ActivityRecord(make_key(ex, 2), 7, start=300, end=310),
        ActivityRecord(make_key(ex, 0), 7, start=100, end=200),
        ActivityRecord(make_key(ex, 1), 145, start=100, end=150, kind="kernel"),
        ActivityRecord(make_key(ex, 3), 145, start=400, end=401, kind="memset"),
        ActivityRecord(make_key(9, 0), 7, start=150, end=160),  # another graph's kernel: ignored
        ActivityRecord(0, 7, start=160, end=170),  # not a graph kernel
        ActivityRecord(make_key(ex, 0), 7, start=1000, end=1100),  # a second replay: first position kept
    ]
    assert calibration_table(recs, ex) == {make_key(ex, 0): (7, 0), make_key(ex, 2): (7, 1),
                                           make_key(ex, 1): (145, 0), make_key(ex, 3): (145, 1)}


def test_calibration_table_ties_are_deterministic():
    ex = 1
    a = ActivityRecord(make_key(ex, 4), 7, start=100, end=120)
    b = ActivityRecord(make_key(ex, 3), 7, start=100, end=110)
    c = ActivityRecord(make_key(ex, 2), 7, start=100, end=110)
    want = {c.graph_node_id: (7, 0), b.graph_node_id: (7, 1), a.graph_node_id: (7, 2)}
    assert calibration_table([a, b, c], ex) == want == calibration_table([c, a, b], ex)


def test_calibration_reproduces_fixture_table_from_its_own_order():
    """Replaying the recorded calibration order (per-stream ordinals) through our table builder."""
    cap = json.loads((FIXTURES / "two_branch.capture.json").read_text())
    ex = cap["exec_cupti_graph_id"]
    recs = []
    for k, v in cap["calibration"].items():
        # start times consistent with the recorded ordinals; streams interleave
        recs.append(ActivityRecord(int(k), v["stream"], start=1000 * v["ordinal"] + v["stream"]))
    got = calibration_table(recs, ex)
    assert got == {int(k): (v["stream"], v["ordinal"]) for k, v in cap["calibration"].items()}


def test_records_from_activities():
    K = types.SimpleNamespace
    acts = [K(kind=1, graph_node_id=make_key(2, 0), stream_id=7, start=5, end=9),
            K(kind=2, graph_node_id=make_key(2, 1), stream_id=7, start=10, end=11),
            K(kind=99, graph_node_id=make_key(2, 2), stream_id=7, start=12, end=13),  # other kind
            K(kind=1, graph_node_id=0, stream_id=7, start=1, end=2)]  # not in a graph
    got = records_from_activities(acts, {1: "kernel", 2: "memset"})
    assert got == [ActivityRecord(make_key(2, 0), 7, 5, 9, "kernel"), ActivityRecord(make_key(2, 1), 7, 10, 11, "memset")]


def fake_session(records):
    @contextlib.contextmanager
    def session(collected, exec_id=None):
        yield
        collected.extend(records)

    return session


def test_calibrate_replay_with_fake_session():
    replays, syncs = [], []
    recs = [ActivityRecord(make_key(3, 1), 7, 20), ActivityRecord(make_key(3, 0), 7, 10)]
    table = calibrate_replay(lambda: replays.append(1), lambda: syncs.append(1), 3, session=fake_session(recs),
                             is_profiling=lambda: False)
    assert table == {make_key(3, 0): (7, 0), make_key(3, 1): (7, 1)}
    assert replays == [1] and len(syncs) == 2  # exactly one replay, synchronized before and after


def test_calibrate_refuses_inside_profiler_and_without_records():
    replays = []
    with pytest.raises(CaptureError, match="profiler session is active"):
        calibrate_replay(lambda: replays.append(1), lambda: None, 3, session=fake_session([]), is_profiling=lambda: True)
    assert replays == []  # nothing ran
    with pytest.raises(CaptureError, match="no activity of executable graph 3"):
        calibrate_replay(lambda: None, lambda: None, 3, session=fake_session([ActivityRecord(make_key(4, 0), 7, 1)]),
                         is_profiling=lambda: False)


def test_calibrate_replay_defers_without_replaying_when_the_session_cannot_start():
    """CUPTI busy (the session raises on entry): deferred, and the caller's replay did not run."""
    replays = []

    @contextlib.contextmanager
    def busy(collected, exec_id=None):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
        yield  # pragma: no cover

    with pytest.raises(CalibrationDeferred, match="could not start: CUPTI_ERROR_NOT_INITIALIZED"):
        calibrate_replay(lambda: replays.append(1), lambda: None, 3, session=busy, is_profiling=lambda: False)
    assert replays == []
    with pytest.raises(CalibrationDeferred, match="profiler"):
        calibrate_replay(lambda: replays.append(1), lambda: None, 3, session=busy, is_profiling=lambda: True)
    assert replays == []


def test_records_from_activities_keeps_one_exec_graph():
    K = types.SimpleNamespace
    acts = [K(kind=1, graph_node_id=make_key(2, 0), stream_id=7, start=5, end=9),
            K(kind=1, graph_node_id=make_key(3, 0), stream_id=7, start=6, end=8)]
    assert [r.graph_node_id for r in records_from_activities(acts, {1: "kernel"}, exec_id=3)] == [make_key(3, 0)]


def test_node_type_names():
    assert node_type_name("cudaGraphNodeTypeKernel") == "kernel"
    assert node_type_name("cudaGraphNodeTypeWaitEvent") == "event_wait"
    assert node_type_name("CU_GRAPH_NODE_TYPE_EVENT_RECORD") == "event_record"
    assert node_type_name("cudaGraphNodeTypeMemAlloc") == "mem_alloc"
    assert node_type_name("cudaGraphNodeTypeWhatever") == "other"


def test_a_prepared_profiler_counts_as_active_until_it_is_disabled(monkeypatch):
    """torch.profiler's warm-up prepares Kineto (CUPTI activity on) before _profiler_enabled()
    turns True: the wrapped module functions say so, and a stop clears it."""
    from support.capture_fakes import fake_profiler_module

    from perfetto_graph_ann.capture import calibration as C

    calls = []
    tap = fake_profiler_module(monkeypatch, _prepare_profiler=lambda *a, **k: calls.append(("prepare", a)),
                               _disable_profiler=lambda: calls.append(("disable",)) or "results")
    watch = C._KinetoWatch()
    monkeypatch.setattr(C, "KINETO", watch)
    watch.install()
    watch.install()  # once only: not wrapped twice
    assert not C.profiler_active()
    tap._prepare_profiler("config", {"CUDA"})
    assert C.profiler_active() and calls == [("prepare", ("config", {"CUDA"}))]
    assert tap._disable_profiler() == "results"  # torch's own result passes through
    assert not C.profiler_active() and calls[-1] == ("disable",)
    replays = []
    tap._prepare_profiler("config", {"CUDA"})
    with pytest.raises(CalibrationDeferred, match="profiler"):
        calibrate_replay(lambda: replays.append(1), lambda: None, 3, session=fake_session([]))
    assert replays == []
