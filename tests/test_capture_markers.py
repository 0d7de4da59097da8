"""Scope edges on large graphs: marker nodes instead of node counts (fake CUDA backend).

A count walks the whole graph (linear in its size on the H200), so from
``markers_from`` nodes on a scope edge adds an empty marker node and takes its local id as
the position. These tests check that markers give the same annotations as counting, stay
out of the node table, switch on at the threshold, fall back to counting where the backend
cannot add one, and that a driver whose marker ids are not positions is caught.
"""
from __future__ import annotations

import threading

import pytest
from support.capture_fakes import FakeCuda

from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.annotations.model import make_key
from perfetto_graph_ann.capture.registry import Registry
from perfetto_graph_ann.capture.scopes import normalize_annotation
from perfetto_graph_ann.errors import CaptureError, SettingError

# every test here runs on the compiled capture path and on the pure-Python one (conftest.py)
pytestmark = pytest.mark.usefixtures("capture_path")

STREAM, SIDE = 0x70, 0x71


def run(markers_from, cuda=None, verify=False):
    """The same workload (nested scopes, a side stream joining inside a scope, unscoped work)."""
    cuda = cuda or FakeCuda()
    cuda.begin_capture(STREAM)
    sess = S.CaptureSession(cuda, STREAM, Registry(), device=0, verify=verify, markers_from=markers_from)
    sess.start()

    def scope(fields):
        tok = sess.recorder.open(normalize_annotation(fields))
        return lambda: sess.recorder.close(tok)

    cuda.launch(STREAM, "before")
    close_outer = scope({"name": "layer", "layer": 0})
    for i in range(3):
        close = scope("attention")
        cuda.launch(STREAM, f"att{i}")
        close()
    close_mlp = scope({"name": "mlp", "stream": 61})
    cuda.join(SIDE, STREAM)
    cuda.launch(SIDE, "side_gemm")
    cuda.launch(STREAM, "mlp_gemm")
    close_mlp()
    cuda.launch(STREAM, "residual")
    close_outer()
    cuda.launch(STREAM, "after")
    sess.finish_capture()
    g = cuda.end_capture(STREAM)
    sess.bind_exec(cuda.instantiate(g))
    template = list(cuda.graphs[g])
    cuda.forget(g)
    return cuda, sess, template


EXPECTED = {
    "before": {},
    "att0": {"name": "attention", "layer": 0}, "att1": {"name": "attention", "layer": 0},
    "att2": {"name": "attention", "layer": 0},
    "side_gemm": {"name": "mlp", "layer": 0, "stream": 61}, "mlp_gemm": {"name": "mlp", "layer": 0, "stream": 61},
    "residual": {"name": "layer", "layer": 0},
    "after": {},
}


def annotations(sess):
    return {n.kernel: dict(n.annotation) for n in sess.record.nodes}


def test_counting_gives_the_expected_annotations():
    cuda, sess, _ = run(None)
    assert annotations(sess) == EXPECTED
    assert cuda.marker_calls == 0 and cuda.count_calls == 10


@pytest.mark.parametrize("markers_from", [0, 1, 4, 6])
def test_markers_give_the_same_annotations_and_stay_out_of_the_table(markers_from):
    cuda, sess, template = run(markers_from)
    assert annotations(sess) == EXPECTED
    markers = [n for n in template if n.type == "empty"]
    assert len(markers) == cuda.marker_calls > 0
    assert cuda.marker_calls + cuda.count_calls == 10  # one call per edge, whichever kind
    rec = sess.record
    assert len(rec.nodes) == len(template) - len(markers) == 8
    assert all(n.type == "kernel" for n in rec.nodes)
    # keys are the template's local ids, which count the markers (the exec graph has them too)
    real = [n for n in template if n.type != "empty"]
    assert [n.key for n in rec.nodes] == [make_key(rec.exec_id, n.local_id) for n in real]
    # counting until the graph holds markers_from nodes, markers from then on
    first = next(i for i, n in enumerate(template) if n.type == "empty")
    assert first >= markers_from


def test_small_graphs_keep_counting_by_default(monkeypatch):
    monkeypatch.delenv(S.MARKERS_ENV, raising=False)
    cuda, sess, _ = run("env")
    assert sess.markers_from == S.DEFAULT_MARKERS_FROM == 512
    assert cuda.marker_calls == 0 and annotations(sess) == EXPECTED


def test_a_backend_that_cannot_add_markers_counts(capture_path):
    cuda = FakeCuda()
    cuda.can_mark = False
    cuda, sess, template = run(0, cuda)
    assert annotations(sess) == EXPECTED
    if capture_path == "python":  # gave up on markers for the rest of the capture
        assert sess.markers_from is None
    else:
        assert not sess.recorder.marking
    assert cuda.count_calls == 10 and not any(n.type == "empty" for n in template)


def test_verify_mode_checks_marker_positions_against_listings():
    cuda, sess, _ = run(0, verify=True)
    assert annotations(sess) == EXPECTED
    assert cuda.list_calls == 10 and cuda.marker_calls == 10


def test_a_driver_whose_marker_ids_are_not_positions_is_caught():
    cuda = FakeCuda()
    cuda.marker_id_skew = 1
    cuda, sess, _ = run(0, cuda)
    with pytest.raises(CaptureError, match="marker node"):
        sess.record
    cuda = FakeCuda()
    cuda.marker_id_skew = 1
    with pytest.raises(CaptureError, match="positioned at node 2 but the graph lists 1"):  # verify mode catches it at the edge
        run(0, cuda, verify=True)


def test_threads_with_markers_tag_their_own_nodes():
    cuda = FakeCuda()
    cuda.begin_capture(STREAM)
    sess = S.CaptureSession(cuda, STREAM, Registry(), markers_from=0)
    sess.start()
    streams = [0x100 + i for i in range(6)]
    for s in streams:
        cuda.join(s, STREAM)
    barrier = threading.Barrier(len(streams))

    def work(i, s):
        barrier.wait()
        tok = sess.recorder.open({"name": f"t{i}"})
        cuda.launch(s, f"k{i}")
        sess.recorder.close(tok)

    threads = [threading.Thread(target=work, args=(i, s)) for i, s in enumerate(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sess.finish_capture()
    sess.bind_exec(cuda.instantiate(cuda.end_capture(STREAM)))
    got = {n.kernel: n.annotation.get("name") for n in sess.record.nodes}
    # a scope open in one thread also holds what other threads launched meanwhile (the graph,
    # not the thread, is counted): each kernel carries its own thread's name or a later one
    assert set(got) == {f"k{i}" for i in range(6)} and all(v is not None for v in got.values())


@pytest.mark.parametrize("raw,want", [("", 512), ("0", 0), ("2048", 2048), ("off", None), ("NEVER", None)])
def test_markers_from_env(monkeypatch, raw, want):
    monkeypatch.setenv(S.MARKERS_ENV, raw)
    assert S.markers_from_env() == want


@pytest.mark.parametrize("raw", ["-1", "many", "1.5"])
def test_markers_from_env_rejects_nonsense(monkeypatch, raw):
    monkeypatch.setenv(S.MARKERS_ENV, raw)
    with pytest.raises(SettingError, match=S.MARKERS_ENV):
        S.markers_from_env()
