"""``pga.graph`` itself on CPU: a fake ``torch`` module drives the fake CUDA driver.

The GPU tests run the same flow on an H200 (tests/gpu); these check the wiring that needs no
GPU: the session is pushed and popped, scopes inside the block tag their nodes, the record is
keyed by the executable graph, the template's table comes from its copy after torch
destroyed the template, and a failure while finishing still ends the capture.
"""
from __future__ import annotations

import gc
import sys

import pytest
from support.capture_fakes import FAKE_TORCH_STREAM

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.annotations.model import make_key
from perfetto_graph_ann.capture.registry import REGISTRY
from perfetto_graph_ann.errors import CaptureError

# every test here runs on the compiled capture path and on the pure-Python one (conftest.py)
pytestmark = pytest.mark.usefixtures("capture_path")

STREAM = FAKE_TORCH_STREAM  # the fake torch's capture stream


@pytest.fixture
def cuda(fake_torch_cuda):
    return fake_torch_cuda


def test_graph_block_tags_scoped_nodes_and_keys_them_by_the_exec_graph(cuda):
    g = sys.modules["torch"].cuda.CUDAGraph()
    with pga.graph(g, calibrate=False):
        assert S.current() is not None
        cuda.launch(STREAM, "embed")
        with pga.mark_kernels({"name": "attention", "stream": 62}):
            cuda.launch(STREAM, "qk")
            with pga.mark_kernels("softmax"):
                cuda.launch(STREAM, "sm")
    assert S.current() is None and cuda.capturing == {}
    rec = REGISTRY.get(g._pga_owner)
    by_kernel = {n.kernel: dict(n.annotation) for n in rec.nodes}
    assert by_kernel == {"embed": {}, "qk": {"name": "attention", "stream": 62},
                         "sm": {"name": "softmax", "stream": 62}}
    assert [n.key for n in rec.nodes] == [make_key(rec.exec_id, i) for i in range(3)]
    assert len(cuda.destroyed) == 1  # the template's copy, read once and freed
    assert dict(pga.get_kernel_annotations())[make_key(rec.exec_id, 1)] == [{"name": "attention", "stream": 62}]
    g.reset()
    assert REGISTRY.get(g._pga_owner) is None


def test_a_failure_while_finishing_still_ends_the_capture(cuda, monkeypatch):
    g = sys.modules["torch"].cuda.CUDAGraph()

    def broken(graph):
        raise CaptureError("cuptiGetGraphId failed with CUPTI error 1")

    monkeypatch.setattr(cuda, "graph_id", broken)
    with pytest.raises(CaptureError, match="cuptiGetGraphId"):
        with pga.graph(g, calibrate=False):
            cuda.launch(STREAM, "k")
    assert cuda.capturing == {} and g.exec is not None  # torch's capture_end ran
    assert S.current() is None


def test_an_unreadable_copy_fails_every_read_not_just_the_first(cuda, monkeypatch):
    g = sys.modules["torch"].cuda.CUDAGraph()
    with pga.graph(g, calibrate=False):
        with pga.mark_kernels("a"):
            cuda.launch(STREAM, "k")
    sess = g._pga_session
    monkeypatch.setattr(cuda, "node_infos", lambda graph: [])  # the copy lists no node
    for _ in range(2):
        with pytest.raises(CaptureError, match="scope ends at node 1"):
            sess.record
    assert len(cuda.destroyed) == 1


def captured(cuda, name: str):
    """A fake CUDAGraph captured with one kernel in a ``name`` scope (calibration off)."""
    g = sys.modules["torch"].cuda.CUDAGraph()
    with pga.graph(g, calibrate=False):
        with pga.mark_kernels(name):
            cuda.launch(STREAM, "k")
    return g


def test_a_graph_object_that_is_garbage_collected_leaves_the_registry(cuda):
    """As torch's destructor resets the graph: a stale entry would tie with its re-capture."""
    old = captured(cuda, "old_name")
    old_owner = old._pga_owner
    new = captured(cuda, "new_name")
    assert cuda.destroyed == []  # neither table read yet
    del old
    gc.collect()
    assert len(cuda.destroyed) == 1  # the dead graph's unread template copy was freed
    assert REGISTRY.get(old_owner) is None
    from perfetto_graph_ann.capture import api

    assert old_owner not in api._REFS  # the weak reference went with it
    names = [dict(n.annotation) for r in REGISTRY.records() for n in r.nodes]
    assert names == [{"name": "new_name"}] and len(cuda.destroyed) == 2
    owner = new._pga_owner
    new.reset()  # reset, then collected: nothing left to drop twice
    del new
    gc.collect()
    assert REGISTRY.get(owner) is None and len(cuda.destroyed) == 2


def test_a_graph_in_a_reference_cycle_leaves_the_registry_when_the_cycle_is_collected(cuda):
    """The weak reference whose callback drops the entry is held outside the graph: a graph in
    cyclic garbage (its wrappers included) still triggers it."""
    g = captured(cuda, "cyclic")
    owner = g._pga_owner
    g.me = g  # a cycle: only the cyclic GC can free it
    del g
    assert REGISTRY.get(owner) is not None
    gc.collect()
    assert REGISTRY.get(owner) is None and cuda.destroyed


# Deferred calibration: the table is recorded at the graph's own first eligible replay,
# never by a replay of ours. The fake driver counts launches (cuda.replays) and activity
# sessions (cuda.sessions); a launch inside a session records one record per work node.

def three_kernels(cuda, calibrate: bool = True):
    g = sys.modules["torch"].cuda.CUDAGraph()
    with pga.graph(g, calibrate=calibrate):
        with pga.mark_kernels("a"):
            cuda.launch(STREAM, "k0")
            cuda.launch(STREAM, "k1", type="memset")
        cuda.launch(STREAM, "k2")
    return g


def table(g):
    """(stream, ordinal) per node, in key order, from the registry's record."""
    return [(n.stream, n.ordinal) for n in REGISTRY.get(g._pga_owner).nodes]


def test_capture_replays_nothing_and_the_first_replay_is_recorded(cuda):
    g = three_kernels(cuda)
    assert cuda.replays == {} and cuda.sessions == 0  # the capture issued no launch of its own
    assert not REGISTRY.get(g._pga_owner).calibrated
    assert "not replayed" in REGISTRY.get(g._pga_owner).calibration_note
    assert "replay" in vars(g)  # the replay is wrapped until it is calibrated
    g.replay()
    assert cuda.replays == {g.exec: 1} and cuda.sessions == 1  # the user's replay, recorded, run once
    assert table(g) == [(7, 0), (7, 1), (7, 2)]  # kernel, memset, kernel: ordinals per stream
    assert REGISTRY.get(g._pga_owner).calibration_note is None
    assert "replay" not in vars(g)  # unwrapped: later replays are torch's own, at no cost
    g.replay()
    assert cuda.replays == {g.exec: 2} and cuda.sessions == 1


def test_calibration_waits_for_a_replay_outside_the_profiler(cuda):
    torch = sys.modules["torch"]
    g = three_kernels(cuda)
    torch.profiling = True
    g.replay()
    g.replay()
    assert cuda.replays == {g.exec: 2} and cuda.sessions == 0  # replayed as asked, not recorded
    assert not REGISTRY.get(g._pga_owner).calibrated
    note = g._pga_session.calibration_note
    assert "profiler" in note and "calibrate(g)" in note
    torch.profiling = False
    g.replay()
    assert cuda.replays == {g.exec: 3} and cuda.sessions == 1
    assert table(g) == [(7, 0), (7, 1), (7, 2)] and "replay" not in vars(g)


def test_calibration_waits_while_cupti_is_busy(cuda):
    g = three_kernels(cuda)
    cuda.busy = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
    g.replay()
    assert cuda.replays == {g.exec: 1} and not REGISTRY.get(g._pga_owner).calibrated
    assert "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" in g._pga_session.calibration_note
    cuda.busy = None
    g.replay()
    assert cuda.replays == {g.exec: 2} and REGISTRY.get(g._pga_owner).calibrated


def test_a_graph_only_replayed_under_the_profiler_stays_structural_with_the_reason(cuda):
    torch = sys.modules["torch"]
    g = three_kernels(cuda)
    torch.profiling = True
    g.replay()
    torch.profiling = False
    snap = REGISTRY.snapshot()  # what export() joins with
    (rec,) = snap.graphs
    assert not rec.calibrated and all(n.stream is None for n in rec.nodes)
    assert rec.calibration_note == g._pga_session.calibration_note and "profiler" in rec.calibration_note


def test_explicit_calibrate_replays_now_and_is_refused_inside_the_profiler(cuda):
    torch = sys.modules["torch"]
    g = three_kernels(cuda, calibrate=False)
    assert "calibration off" in g._pga_session.calibration_note
    g.replay()
    assert cuda.replays == {g.exec: 1} and cuda.sessions == 0 and "replay" not in vars(g)
    torch.profiling = True
    with pytest.raises(CaptureError, match="profiler"):
        pga.calibrate(g)
    assert cuda.replays == {g.exec: 1}  # refused before replaying
    torch.profiling = False
    pga.calibrate(g)
    assert cuda.replays == {g.exec: 2} and cuda.sessions == 1
    assert table(g) == [(7, 0), (7, 1), (7, 2)] and g._pga_session.calibration_note is None


def test_explicit_calibrate_before_the_first_replay_unwraps_the_replay(cuda):
    g = three_kernels(cuda)
    pga.calibrate(g)
    assert cuda.replays == {g.exec: 1} and "replay" not in vars(g)
    g.replay()
    assert cuda.replays == {g.exec: 2} and cuda.sessions == 1


def test_a_calibration_that_records_nothing_is_not_retried_and_the_replay_ran_once(cuda):
    g = three_kernels(cuda)
    cuda.exec_nodes[g.exec] = []  # the launch records nothing of this graph
    with pytest.warns(RuntimeWarning, match="no activity of executable graph"):
        g.replay()
    assert cuda.replays == {g.exec: 1} and "replay" not in vars(g)
    assert "calibration failed" in g._pga_session.calibration_note
    g.replay()
    assert cuda.sessions == 1


def test_reinstantiation_calibrates_the_new_executable_graph_at_its_first_replay(cuda):
    g = three_kernels(cuda)
    g.replay()
    first = REGISTRY.get(g._pga_owner).exec_id
    g.instantiate()  # a new executable graph: new keys, table to record again
    assert "replay" in vars(g) and not REGISTRY.get(g._pga_owner).calibrated
    g.replay()
    rec = REGISTRY.get(g._pga_owner)
    assert rec.exec_id != first and rec.calibrated and cuda.sessions == 2


def test_no_activity_recorder_here_leaves_the_replay_unwrapped_with_the_reason(cuda):
    cuda.no_calibration = "cupti-python is not installed"
    g = three_kernels(cuda)
    assert "replay" in vars(g)  # only until the first replay, which finds nothing to do
    g.replay()
    assert "replay" not in vars(g) and cuda.sessions == 0
    assert g._pga_session.calibration_note == "no calibration here: cupti-python is not installed"


def test_a_replay_during_another_capture_is_not_recorded(cuda):
    g = three_kernels(cuda)
    cuda.begin_capture(STREAM)  # the user captures another graph meanwhile
    g.replay()
    assert cuda.sessions == 0 and "stream capture" in g._pga_session.calibration_note
    cuda.end_capture(STREAM)
    g.replay()
    assert REGISTRY.get(g._pga_owner).calibrated


def test_reset_unwraps_the_replay(cuda):
    g = three_kernels(cuda)
    g.reset()
    assert "replay" not in vars(g)
